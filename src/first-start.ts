import type { INestApplication } from '@nestjs/common';
import { DataSource } from 'typeorm';
import { AccountsService } from './accounts/accounts.service';
import { AssistantsService } from './assistants/assistants.service';
import type { AppConfig } from './config/app-config';
import { APP_CONFIG } from './config/config.module';
import { exposureWarning } from './exposure-warning';
import { ModelsService } from './models/models.service';
import { WorkspacesService } from './workspaces/workspaces.service';

/** $10.00: enough to try every model a few times. */
const DEMO_CREDIT_MILLICENTS = 1_000_000;
const PREFERRED_DEMO_MODEL = 'gpt-4o-mini';
/** The first-start owner of the demo workspace: no password, signs in by the printed link. */
export const DEMO_OWNER = { email: 'owner@localhost', name: 'Demo owner' } as const;

/**
 * Where people open the dashboard: PUBLIC_URL when set (it includes any sub-path), else the
 * address the server listens on with BASE_PATH.
 */
export function dashboardUrl(config: AppConfig, baseUrl: string): string {
  return config.dashboard.publicUrl ?? `${baseUrl}${config.dashboard.basePath}`;
}

/**
 * On an empty embedded database, creates a demo workspace with credit, a key and a demo
 * assistant, and its owner (owner@localhost, no password), and prints the key and a
 * single-use sign-in link once: `npm install && npm start` is all it takes to make a first
 * call, or to open the dashboard. All of it commits in one transaction: a start that fails
 * halfway leaves the database empty, so the next start tries again and prints a key.
 */
export async function createDemoWorkspaceOnFirstStart(app: INestApplication, baseUrl: string): Promise<void> {
  const workspaces = app.get(WorkspacesService);
  if ((await workspaces.count()) > 0) return;
  // gpt-4o-mini: cheap and able to call file_search. An operator's catalog (MODEL_CATALOG_FILE)
  // may not have it: then the first model that can call tools, else the first model.
  const models = app.get(ModelsService).chatModels();
  const model =
    models.find((candidate) => candidate.id === PREFERRED_DEMO_MODEL) ??
    models.find((candidate) => candidate.functionCalling) ??
    models[0];
  const accounts = app.get(AccountsService);
  const { demo, assistant, signInToken } = await app.get(DataSource).transaction(async (manager) => {
    const demo = await workspaces.create({ name: 'Demo', tier: 'pro', balanceMillicents: DEMO_CREDIT_MILLICENTS }, manager);
    const assistant = await app.get(AssistantsService).create(
      demo.workspace.id,
      {
        name: 'Demo',
        slug: 'demo',
        model: model.id,
        ...(model.functionCalling
          ? {
              description: 'A general assistant that can search the documents you attach to it.',
              systemPrompt: 'You are a helpful, concise assistant. When the user asks about their documents, use file_search.',
              tools: ['file_search' as const],
            }
          : { description: 'A general assistant.', systemPrompt: 'You are a helpful, concise assistant.', tools: [] }),
      },
      manager,
    );
    const owner = await accounts.createOwnerWithoutPassword(manager, demo.workspace.id, DEMO_OWNER);
    const signInToken = await accounts.issueToken(owner.id, 'sign_in', manager);
    return { demo, assistant, signInToken };
  });
  const config = app.get<AppConfig>(APP_CONFIG);
  const dashboard = dashboardUrl(config, baseUrl);
  const line = '='.repeat(78);
  const exposure = exposureWarning(config);
  process.stdout.write(
    [
      '',
      line,
      ' First start: created the workspace "Demo" (tier pro, $10.00 of credit) and the assistant "demo".',
      ' Its API key is shown only this once:',
      '',
      `   ${demo.apiKey}`,
      '',
      ` Base URL for OpenAI clients: ${baseUrl}/v1`,
      ' Try it:',
      `   curl ${baseUrl}/v1/models -H "Authorization: Bearer ${demo.apiKey}"`,
      `   curl ${baseUrl}/v1/chat/completions -H "Authorization: Bearer ${demo.apiKey}" \\`,
      `     -H "Content-Type: application/json" -d '{"assistant_id": "demo", "messages": [{"role": "user", "content": "Hello!"}]}'`,
      '',
      ` Dashboard: ${dashboard}/  ->  sign in once with: ${dashboard}/sign-in/${signInToken}`,
      `   (as ${DEMO_OWNER.email}, owner of "Demo"; the link works once, for 24 hours, and opens its Overview: set a password there)`,
      '',
      ` API docs: ${baseUrl}/docs     More keys: npm run cli -- key create --workspace ${demo.workspace.id}`,
      ` Documents for the assistant: npm run cli -- document add --assistant ${assistant.id} --file <path>`,
      ...(exposure ? ['', ...wrap(`WARNING: ${exposure}`, 76).map((text) => ` ${text}`)] : []),
      line,
      '',
    ].join('\n') + '\n',
  );
}

/** Words in lines of at most `width` characters, for the banner. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  for (const word of text.split(' ')) {
    const last = lines.length - 1;
    if (last >= 0 && lines[last].length + 1 + word.length <= width) lines[last] += ` ${word}`;
    else lines.push(word);
  }
  return lines;
}
