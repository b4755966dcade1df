// tsc compiles only TypeScript: the dashboard's templates and assets are copied beside the compiled code.
const { cpSync, rmSync } = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
for (const folder of ['views', 'assets']) {
  const from = path.join(root, 'src', 'dashboard', folder);
  const to = path.join(root, 'dist', 'src', 'dashboard', folder);
  rmSync(to, { recursive: true, force: true });
  cpSync(from, to, { recursive: true });
}
