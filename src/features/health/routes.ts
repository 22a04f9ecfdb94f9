import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { AppDeps } from '../../app.js';
import { AppError } from '../../platform/errors.js';
import { problems } from '../../platform/schemas.js';

const Status = Type.Object({ status: Type.String() });

export const healthRoutes: FastifyPluginAsyncTypebox<AppDeps> = async (app, deps) => {
  app.get(
    '/healthz',
    { schema: { tags: ['health'], operationId: 'getHealth', summary: 'The process is alive', response: { 200: Status } } },
    async () => ({ status: 'ok' }),
  );
  app.get(
    '/readyz',
    {
      schema: {
        tags: ['health'],
        operationId: 'getReadiness',
        summary: 'The database answers (PostgreSQL: and takes writes; SQLite: and no WAL sync has failed); 503 otherwise',
        response: { 200: Status, ...problems(503) },
      },
    },
    async () => {
      try {
        await deps.database.ping();
      } catch {
        throw new AppError('storage_unavailable', 'the database does not answer or takes no writes');
      }
      return { status: 'ready' };
    },
  );
};
