// Build the web UI into the api-gateway package (`make ui`, or `npm run build`).
//
// Bundles src/main.js and the libraries it imports (versions pinned by
// package-lock.json) into one ES module, copies the page and the style
// sheet, gathers the libraries' licences, and writes BUILD.json: the sha256
// of every input and output, which tests/unit/api_gateway/test_ui_build.py
// checks so a committed build cannot fall behind its sources.

import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', 'src', 'composer_api_gateway', 'ui');
const check = process.argv.includes('--check');

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? files(path) : [path];
  });
}

function digests(root, paths) {
  const result = {};
  for (const path of paths.map((p) => relative(root, p).split('\\').join('/')).sort()) {
    result[path] = createHash('sha256').update(readFileSync(join(root, path))).digest('hex');
  }
  return result;
}

const inputs = () => digests(here, [...files(join(here, 'src')), ...['package.json', 'package-lock.json', 'build.mjs'].map((f) => join(here, f))]);

if (check) { // is the committed build the build of these sources?
  const stamp = JSON.parse(readFileSync(join(out, 'BUILD.json'), 'utf8'));
  const ok = JSON.stringify(stamp.inputs) === JSON.stringify(inputs());
  console.log(ok ? 'the UI build is up to date' : 'the UI build is stale: run `make ui` and commit the result');
  process.exit(ok ? 0 : 1);
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(here, 'src', 'main.js')],
  outfile: join(out, 'app.js'),
  bundle: true,
  format: 'esm',
  target: ['es2020'],
  minify: true,
  legalComments: 'none', // the licences go to THIRD_PARTY_LICENSES.txt whole
  logLevel: 'warning',
});
copyFileSync(join(here, 'src', 'index.html'), join(out, 'index.html'));
copyFileSync(join(here, 'src', 'style.css'), join(out, 'style.css'));

const lock = JSON.parse(readFileSync(join(here, 'package-lock.json'), 'utf8'));
const notices = Object.entries(lock.packages)
  .filter(([path, info]) => path.startsWith('node_modules/') && !info.dev)
  .sort()
  .map(([path, info]) => {
    const name = path.slice('node_modules/'.length);
    const dir = join(here, path);
    const file = readdirSync(dir).find((f) => /^licen[cs]e/i.test(f));
    const text = file ? readFileSync(join(dir, file), 'utf8').trim() : `(${info.license})`;
    return `${name} ${info.version} — ${info.license}\n\n${text}\n`;
  });
writeFileSync(join(out, 'THIRD_PARTY_LICENSES.txt'),
  'The Composer web UI bundles these libraries (app.js):\n\n' + notices.join('\n' + '-'.repeat(72) + '\n\n'));

const outputs = digests(out, files(out));
writeFileSync(join(out, 'BUILD.json'), JSON.stringify({ inputs: inputs(), outputs }, null, 2) + '\n');
for (const [name] of Object.entries(outputs)) {
  console.log(`${name.padEnd(26)} ${(statSync(join(out, name)).size / 1024).toFixed(1).padStart(7)} KiB`);
}
if (!existsSync(join(out, 'app.js'))) process.exit(1);
