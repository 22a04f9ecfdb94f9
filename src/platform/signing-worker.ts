import { sign, type KeyObject } from 'node:crypto';
import { Worker } from 'node:worker_threads';

/**
 * Ed25519 signatures on a worker thread, so that the event loop can serve requests (and a batch
 * of decisions can commit) while they are computed. One worker serves the whole process; it is
 * started on first use and holds the process open only while it has work.
 *
 * A signature here is exactly the one `crypto.sign` makes on the event loop: Ed25519 is
 * deterministic (RFC 8032), the same key and message always give the same 64 bytes. If the
 * worker fails, what it had not answered is signed on the event loop instead, so a caller never
 * sees the difference; the next call starts a new worker.
 */
export class SigningWorker {
  private worker?: Worker;
  private nextId = 1;
  private readonly pending = new Map<number, Job>();
  /** Keys the current worker holds, by the KeyObject they came from. */
  private keys = new WeakMap<KeyObject, number>();
  private nextKey = 1;

  /**
   * The signatures of `digests` (in order) with `key`. Rejects only if the key cannot sign at
   * all, which signing on the event loop would have thrown too.
   */
  signAll(key: KeyObject, digests: Buffer[]): Promise<Buffer[]> {
    if (digests.length === 0) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      const job: Job = { digests, key, resolve, reject };
      try {
        const worker = this.started();
        let keyId = this.keys.get(key);
        if (keyId === undefined) {
          keyId = this.nextKey++;
          this.keys.set(key, keyId);
          worker.postMessage({ keyId, der: key.export({ format: 'der', type: 'pkcs8' }) });
        }
        const id = this.nextId++;
        // An ArrayBuffer of its own, to hand over: Buffer.concat may return a slice of Node's shared pool.
        const message = Buffer.allocUnsafeSlow(32 * digests.length);
        digests.forEach((d, i) => d.copy(message, 32 * i));
        this.pending.set(id, job);
        if (this.pending.size === 1) worker.ref();
        worker.postMessage({ id, keyId, digests: message }, [message.buffer]);
      } catch {
        signInline(job);
      }
    });
  }

  /** Stops the worker; what it had not answered yet is signed on the event loop. */
  async terminate(): Promise<void> {
    await this.worker?.terminate();
  }

  private started(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(
      `const { parentPort } = require('node:worker_threads');
       const { createPrivateKey, sign } = require('node:crypto');
       const keys = new Map();
       parentPort.on('message', (m) => {
         if (m.der) { keys.set(m.keyId, createPrivateKey({ key: Buffer.from(m.der), format: 'der', type: 'pkcs8' })); return; }
         const key = keys.get(m.keyId);
         const digests = Buffer.from(m.digests.buffer, m.digests.byteOffset, m.digests.byteLength);
         const n = digests.length / 32;
         const sigs = Buffer.allocUnsafeSlow(64 * n);
         for (let i = 0; i < n; i++) sign(null, digests.subarray(32 * i, 32 * i + 32), key).copy(sigs, 64 * i);
         parentPort.postMessage({ id: m.id, sigs }, [sigs.buffer]);
       });`,
      { eval: true },
    );
    worker.unref();
    worker.on('message', (m: { id: number; sigs: Uint8Array }) => {
      const job = this.pending.get(m.id);
      if (!job) return;
      this.pending.delete(m.id);
      if (this.pending.size === 0) worker.unref();
      const sigs = Buffer.from(m.sigs.buffer, m.sigs.byteOffset, m.sigs.byteLength);
      job.resolve(job.digests.map((_, i) => sigs.subarray(64 * i, 64 * i + 64)));
    });
    const fail = () => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.keys = new WeakMap();
      const jobs = [...this.pending.values()];
      this.pending.clear();
      for (const job of jobs) signInline(job);
    };
    worker.on('error', fail);
    worker.on('exit', fail);
    this.worker = worker;
    return worker;
  }
}

interface Job {
  digests: Buffer[];
  key: KeyObject;
  resolve: (sigs: Buffer[]) => void;
  reject: (err: unknown) => void;
}

/** Signs a job on the event loop (the worker could not). */
function signInline(job: Job): void {
  try {
    job.resolve(job.digests.map((d) => sign(null, d, job.key)));
  } catch (err) {
    job.reject(err);
  }
}

export const signingWorker = new SigningWorker();
