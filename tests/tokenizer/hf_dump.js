// Encodes and decodes every input file with the Hugging Face `tokenizers`
// library and writes the results as JSON lines, one per input:
//   {"name": ..., "ids": [...], "plain_ids": [...], "decoded": ..., "decoded_skip": ...}
// "ids" use add_special_tokens=true, "plain_ids" false.
//   node hf_dump.js <node_modules dir> <tokenizer.json> <out.jsonl> <input files...>
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modulesDir, tokenizerPath, outPath, ...inputs] = process.argv.slice(2);
  const { Tokenizer } = require(path.resolve(modulesDir, 'tokenizers'));
  const tok = Tokenizer.fromFile(tokenizerPath);
  const out = fs.openSync(outPath, 'w');
  for (const input of inputs) {
    const text = fs.readFileSync(input).toString('utf8');
    const withSpecial = await tok.encode(text, null, { addSpecialTokens: true });
    const plain = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = withSpecial.getIds();
    const record = {
      name: path.basename(input),
      ids,
      plain_ids: plain.getIds(),
      decoded: await tok.decode(ids, false),
      decoded_skip: await tok.decode(ids, true),
    };
    fs.writeSync(out, JSON.stringify(record) + '\n');
  }
  fs.closeSync(out);
}

main().catch((e) => { console.error(e); process.exit(1); });
