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
// The chat widget's script (src/widget/assets/widget.js), which GET /widget.js serves with the Markdown renderer above.
const widgetAssets = path.join(root, 'dist', 'src', 'widget', 'assets');
rmSync(widgetAssets, { recursive: true, force: true });
cpSync(path.join(root, 'src', 'widget', 'assets'), widgetAssets, { recursive: true });
