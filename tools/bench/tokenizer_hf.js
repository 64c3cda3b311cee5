// Hugging Face side of //tools/bench:tokenizer: encodes every input file with
// the `tokenizers` node bindings, one call at a time, and prints
// "<bytes> <best seconds over runs> <tokens>" on stdout.
//   node tokenizer_hf.js <node_modules dir> <tokenizer.json> <runs> <files...>
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modulesDir, tokenizerPath, runsArg, ...files] = process.argv.slice(2);
  const { Tokenizer } = require(path.resolve(modulesDir, 'tokenizers'));
  const tok = Tokenizer.fromFile(tokenizerPath);
  const texts = files.map((f) => fs.readFileSync(f).toString('utf8'));
  const bytes = files.reduce((n, f) => n + fs.statSync(f).size, 0);
  let best = Infinity, tokens = 0;
  for (let run = 0; run < Number(runsArg); ++run) {
    tokens = 0;
    const start = process.hrtime.bigint();
    for (const t of texts) tokens += (await tok.encode(t, null, { addSpecialTokens: false })).getLength();
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  console.log(`${bytes} ${best} ${tokens}`);
}

main().catch((e) => { console.error(e); process.exit(1); });
