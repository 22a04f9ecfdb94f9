/**
 * What a benchmark target is. A target runs in its own child process (bench/server.ts) and tells
 * the parent, once it listens, what load to send it. Everything in a LoadSpec crosses the IPC
 * channel, so it must be plain JSON.
 */

export interface LoadRequest {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  path: string;
  headers?: Record<string, string>;
  /** Serialized body (JSON text for JSON endpoints). */
  body?: string;
}

export interface LoadSpec {
  /** One request sent again and again, or several cycled in order by every connection. */
  requests: LoadRequest[];
  /**
   * The only status code any response may have (default 200). A benchmark run with any other
   * status, connection error or timeout fails loudly. A paid-route target, for example, sets 402.
   */
  expectStatus?: number;
  /** A substring the smoke-check response body must contain (checked once, before any load). */
  expectBodyIncludes?: string;
  /** Short description for the report. */
  description: string;
  /** Replace `[<id>]` in request bodies with a fresh id per request (autocannon idReplacement). */
  idReplacement?: boolean;
}

/** A target started inside the child process. */
export interface RunningTarget {
  listen(opts: { host: string; port: number }): Promise<string>;
  load: LoadSpec;
  /** The same request without a socket (Fastify inject), for in-process profiling. */
  inject?(req: LoadRequest): Promise<{ statusCode: number; body: string }>;
  close(): Promise<void>;
}

/** A benchmark target module: bench/targets/<name>.ts default-exports one of these. */
export interface TargetModule {
  start(): Promise<RunningTarget>;
}

/** Messages from bench/server.ts to the parent. */
export type ChildMessage =
  | { type: 'ready'; port: number; load: LoadSpec; pid: number }
  | { type: 'cpu'; id: number; userMicros: number; systemMicros: number; wallMicros: number; rssBytes?: number; heapUsedBytes?: number; loopActiveMs?: number; loopIdleMs?: number }
  | { type: 'error'; message: string };

/** Messages from the parent to bench/server.ts. */
export type ParentMessage = { type: 'cpu'; id: number } | { type: 'stop' };

export const injectWith = (app: { inject(o: object): Promise<{ statusCode: number; body: string }> }) =>
  (req: LoadRequest) => app.inject({ method: req.method, url: req.path, ...(req.headers ? { headers: req.headers } : {}), ...(req.body !== undefined ? { payload: req.body } : {}) });
