/** Every rule and store takes its time from a Clock so tests can move time without sleeping. */
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

/** A clock tests can set and advance. */
export class ManualClock implements Clock {
  private t: number;
  constructor(start: Date | string = '2026-01-15T12:00:00.000Z') {
    this.t = new Date(start).getTime();
  }
  now(): Date {
    return new Date(this.t);
  }
  set(at: Date | string): void {
    this.t = new Date(at).getTime();
  }
  advance(ms: number): void {
    this.t += ms;
  }
}

/**
 * How long ago `at` was, in ms, as of `now` (both epoch ms). A time after `now` (recorded before
 * the system clock was stepped back) has no age one can trust: it counts as infinitely old, so a
 * cache is never reused for longer than it was meant to be.
 */
export function ageMs(now: number, at: number): number {
  const age = now - at;
  return age < 0 ? Number.POSITIVE_INFINITY : age;
}
