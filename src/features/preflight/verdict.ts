import type { Decision, Finding, PreflightEvidence } from './findings.js';
import { NATIVE_TOKEN, same } from './known.js';

export type Confidence = 'high' | 'medium' | 'low';

export interface Verdict {
  decision: Decision;
  /** Risk, 0 (nothing found) to 100; null when the simulation could not run and nothing was found. */
  score: number | null;
  confidence: Confidence;
}

/**
 * Decision: BLOCK if any block finding, else WARN if any warn finding, else INCOMPLETE if the
 * simulation could not run, else ALLOW. A static finding (calldata to an EOA, a burn address)
 * still decides without a simulation: the evidence for it does not need one.
 *
 * Score (risk; higher is worse), banded so that it never contradicts the decision:
 *   BLOCK  80, +5 per further block finding, +2 per warn finding, at most 100;
 *   WARN   30, +10 per further warn finding, at most 70;
 *   ALLOW  0 (info findings carry no risk);
 *   INCOMPLETE null: missing evidence is not a low risk.
 *
 * Confidence: low when the simulation could not run; otherwise high unless the evidence has a
 * gap, then medium. Gaps: no sender given (fresh sender), no call trace, the poisoning check
 * failed, the destination's kind unknown, or a moved token whose decimals could not be read.
 */
export function verdictOf(findings: Finding[], e: PreflightEvidence): Verdict {
  const blocks = findings.filter((f) => f.severity === 'block').length;
  const warns = findings.filter((f) => f.severity === 'warn').length;
  const decision: Decision = blocks > 0 ? 'BLOCK' : warns > 0 ? 'WARN' : e.simulation.ran ? 'ALLOW' : 'INCOMPLETE';
  const score =
    decision === 'BLOCK' ? Math.min(100, 80 + 5 * (blocks - 1) + 2 * warns)
    : decision === 'WARN' ? Math.min(70, 30 + 10 * (warns - 1))
    : decision === 'ALLOW' ? 0
    : null;
  return { decision, score, confidence: confidenceOf(e) };
}

function confidenceOf(e: PreflightEvidence): Confidence {
  if (!e.simulation.ran) return 'low';
  const unknownDecimals = e.movements.some(
    (m) => m.standard === 'erc20' && !same(m.token, NATIVE_TOKEN) && e.tokens.get(m.token.toLowerCase())?.decimals == null,
  );
  const gaps = [!e.senderProvided, e.trace === null, e.counterpartiesFailed, !e.accounts.has(e.tx.to.toLowerCase()), unknownDecimals];
  return gaps.some(Boolean) ? 'medium' : 'high';
}
