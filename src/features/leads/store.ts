import type { Database } from '../../platform/db/database.js';
import { newId } from '../../platform/ids.js';

export const LEAD_RETENTION_DAYS = 90;

export interface NewLead {
  email: string;
  company: string;
  monthlyDecisions: string;
  needs: string;
  source: string;
}

export class LeadStore {
  constructor(private readonly database: Database) {}

  async insert(lead: NewLead, now: Date): Promise<string> {
    const id = newId('lead');
    await this.database.db
      .insertInto('pilot_leads')
      .values({
        id,
        email: lead.email,
        company: lead.company,
        monthly_decisions: lead.monthlyDecisions,
        needs: lead.needs,
        source: lead.source,
        created_at: now.toISOString(),
      })
      .execute();
    return id;
  }

  /** Deletes leads past the 90-day retention; returns how many went. */
  async purgeExpired(now: Date): Promise<number> {
    const cutoff = new Date(now.getTime() - LEAD_RETENTION_DAYS * 86_400_000).toISOString();
    const res = await this.database.db.deleteFrom('pilot_leads').where('created_at', '<', cutoff).executeTakeFirst();
    return Number(res.numDeletedRows);
  }

  async count(): Promise<number> {
    const row = await this.database.db
      .selectFrom('pilot_leads')
      .select((eb) => eb.fn.countAll().as('n'))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }
}
