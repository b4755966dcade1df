import type { INestApplication } from '@nestjs/common';
import { WorkspacesService } from './workspaces.service';

/** $10.00: enough to try every model a few times. */
const DEMO_CREDIT_MILLICENTS = 1_000_000;

/**
 * On an empty embedded database, creates a demo workspace with credit and a key, and
 * prints the key once: `npm install && npm start` is all it takes to make a first call.
 */
export async function createDemoWorkspaceOnFirstStart(app: INestApplication, baseUrl: string): Promise<void> {
  const workspaces = app.get(WorkspacesService);
  if ((await workspaces.count()) > 0) return;
  const demo = await workspaces.create({ name: 'Demo', tier: 'pro', balanceMillicents: DEMO_CREDIT_MILLICENTS });
  const line = '='.repeat(78);
  process.stdout.write(
    [
      '',
      line,
      ' First start: created the workspace "Demo" (tier pro, $10.00 of credit).',
      ' Its API key is shown only this once:',
      '',
      `   ${demo.apiKey}`,
      '',
      ` Base URL for OpenAI clients: ${baseUrl}/v1`,
      ' Try it:',
      `   curl ${baseUrl}/v1/models -H "Authorization: Bearer ${demo.apiKey}"`,
      '',
      ` API docs: ${baseUrl}/docs     More keys: npm run cli -- key create --workspace ${demo.workspace.id}`,
      line,
      '',
    ].join('\n') + '\n',
  );
}
