import { beforeEach, expect } from 'vitest';
import { ADDR, createTestApp, json, type TestApp } from './app.js';
import { expectProblem, type Res } from './problems.js';
import { suiteFixture } from './suite.js';

/** Helpers for the protected spend-policy tests: create a policy, ask for decisions, approve. */

export const POLICIES = '/api/spendpolicy/policies';
export const DECISIONS = '/api/spendpolicy/decisions';
export const AGENT = 'agent-7';

/** The clock time at which each test of useSpendPolicyApp() starts. */
export const START = '2026-01-15T12:00:00.000Z';

/** One app for the enclosing describe block, its clock set to START before each test. */
export function useSpendPolicyApp(): TestApp {
  const t = suiteFixture(() => createTestApp());
  beforeEach(() => {
    t.clock.set(START);
  });
  return t;
}

/** 401 with the exact title the specification gives the endpoints that need the admin key. */
export function expectAdminKeyRequired(res: Res) {
  const body = expectProblem(res, 401, 'admin_key_required');
  expect(body.title).toBe('Admin key required');
}

/** 401 with the exact title the specification gives the endpoints that need the agent key. */
export function expectAgentKeyRequired(res: Res) {
  const body = expectProblem(res, 401, 'agent_key_required');
  expect(body.title).toBe('Agent key required');
}

export const ADMIN_KEY_RE = /^sgp_admin_[A-Za-z0-9_-]{43}$/;
export const AGENT_KEY_RE = /^sgp_agent_[A-Za-z0-9_-]{43}$/;
export const POLICY_ID_RE = /^sgp_[0-9a-f]{32}$/;
export const DECISION_ID_RE = /^dec_[0-9a-f]{32}$/;
export const ISO_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

/** Well-formed ids that no policy or decision has. */
export const UNKNOWN_POLICY_ID = `sgp_${'0'.repeat(32)}`;
export const UNKNOWN_DECISION_ID = `dec_${'0'.repeat(32)}`;

export interface Rules {
  maxPerTransaction: string;
  dailyBudget: string;
  requireHumanAbove: string;
  maxRepeats: number;
  allowedRecipients: string[];
  blockUnknownRecipients: boolean;
}

/** alice and bob are known; 20 needs a human above it, 50 is the most per payment and per day. */
export function rules(overrides: Partial<Rules> = {}): Rules {
  return {
    maxPerTransaction: '50',
    dailyBudget: '100',
    requireHumanAbove: '20',
    maxRepeats: 10,
    allowedRecipients: [ADDR.alice, ADDR.bob],
    blockUnknownRecipients: true,
    ...overrides,
  };
}

export function createBody(overrides: Partial<Rules> = {}): { name: string; agentId: string; policy: Rules } {
  return { name: 'Ops payouts', agentId: AGENT, policy: rules(overrides) };
}

export interface Created {
  policyId: string;
  adminKey: string;
  agentKey: string;
  revision: number;
  [k: string]: unknown;
}

export const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

export async function createPolicy(t: TestApp, overrides: Partial<Rules> = {}): Promise<Created> {
  const res = await t.app.inject({ method: 'POST', url: POLICIES, payload: createBody(overrides) });
  expect(res.statusCode, res.body).toBe(201);
  return json<Created>(res);
}

export function getPolicy(t: TestApp, policyId: string, headers: Record<string, string> = {}) {
  return t.app.inject({ method: 'GET', url: `${POLICIES}/${policyId}`, headers });
}

export function putPolicy(t: TestApp, policyId: string, body: unknown, headers: Record<string, string> = {}) {
  return t.app.inject({ method: 'PUT', url: `${POLICIES}/${policyId}`, headers, payload: body as Record<string, unknown> });
}

export interface Spend {
  requestId: string;
  amount: string;
  recipient?: string;
  agentId?: string;
  policyId?: string;
}

let counter = 0;
/** A fresh requestId, unique within the test run. */
export const rid = (label = 'req') => `${label}-${++counter}-${Date.now().toString(36)}`;

export function decisionBody(policyId: string, spend: Partial<Spend> & { amount: string }) {
  return {
    policyId: spend.policyId ?? policyId,
    requestId: spend.requestId ?? rid(),
    agentId: spend.agentId ?? AGENT,
    chain: 'base',
    asset: 'USDC',
    recipient: spend.recipient ?? ADDR.alice,
    amount: spend.amount,
  };
}

/** POST /decisions with the policy's agent key (or `key`) and returns the raw response. */
export function decideRaw(t: TestApp, p: { policyId: string; agentKey: string }, spend: Partial<Spend> & { amount: string }, key = p.agentKey) {
  return t.app.inject({ method: 'POST', url: DECISIONS, headers: bearer(key), payload: decisionBody(p.policyId, spend) });
}

/** POST /decisions expecting 200; returns `{ decision, receipt }`. */
export async function decide(t: TestApp, p: { policyId: string; agentKey: string }, spend: Partial<Spend> & { amount: string }) {
  const res = await decideRaw(t, p, spend);
  expect(res.statusCode, res.body).toBe(200);
  return json<{ decision: any; receipt: any }>(res);
}

export function readDecision(t: TestApp, decisionId: string, headers: Record<string, string> = {}) {
  return t.app.inject({ method: 'GET', url: `${DECISIONS}/${decisionId}`, headers });
}

/** POST approve; `body` undefined sends a bare POST without a body. */
export function approve(t: TestApp, decisionId: string, key: string | undefined, body?: unknown) {
  return t.app.inject({
    method: 'POST',
    url: `${DECISIONS}/${decisionId}/approve`,
    headers: key ? bearer(key) : {},
    ...(body === undefined ? {} : { payload: body as Record<string, unknown> }),
  });
}

export function listDecisions(t: TestApp, policyId: string, key: string | undefined, query = '') {
  return t.app.inject({ method: 'GET', url: `${POLICIES}/${policyId}/decisions${query ? `?${query}` : ''}`, headers: key ? bearer(key) : {} });
}

export function rotateAgentKey(t: TestApp, policyId: string, key: string | undefined) {
  return t.app.inject({ method: 'POST', url: `${POLICIES}/${policyId}/agent-key`, headers: key ? bearer(key) : {} });
}

export function rotateAdminKey(t: TestApp, policyId: string, key: string | undefined) {
  return t.app.inject({ method: 'POST', url: `${POLICIES}/${policyId}/admin-key`, headers: key ? bearer(key) : {} });
}
