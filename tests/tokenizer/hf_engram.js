// Builds the Engram compressed vocabulary (spec model-v41.md §4.7 step 1) of a
// tokenizer with the Hugging Face library, exactly as the reference Python
// does it (decode each id alone, the normalizer sequence below, the U+FFFD
// and empty-key fallbacks, first-seen ids), and writes
// {"size": N, "map": [compressed id per token id]}.
//   node hf_engram.js <node_modules dir> <tokenizer.json> <out.json>
'use strict';
const fs = require('fs');
const path = require('path');

async function main() {
  const [modulesDir, tokenizerPath, outPath] = process.argv.slice(2);
  const { Tokenizer } = require(path.resolve(modulesDir, 'tokenizers'));
  const tok = Tokenizer.fromFile(tokenizerPath);
  const spec = JSON.parse(fs.readFileSync(tokenizerPath, 'utf8'));
  const sentinel = '\uE000';
  spec.normalizer = {
    type: 'Sequence',
    normalizers: [
      { type: 'NFKC' }, { type: 'NFD' }, { type: 'StripAccents' }, { type: 'Lowercase' },
      { type: 'Replace', pattern: { Regex: '[ \t\r\n]+' }, content: ' ' },
      { type: 'Replace', pattern: { Regex: '^ $' }, content: sentinel },
      { type: 'Strip', strip_left: true, strip_right: true },
      { type: 'Replace', pattern: { String: sentinel }, content: ' ' },
    ],
  };
  const normalizer = Tokenizer.fromString(JSON.stringify(spec)).getNormalizer();
  const n = tok.getVocabSize(true);
  const keys = new Map();
  const map = [];
  for (let id = 0; id < n; ++id) {
    const text = await tok.decode([id], false);
    const key = text.includes('\ufffd') ? (tok.idToToken(id) ?? '')
                                        : (normalizer.normalizeString(text) || text);
    if (!keys.has(key)) keys.set(key, keys.size);
    map.push(keys.get(key));
  }
  fs.writeFileSync(outPath, JSON.stringify({ size: keys.size, map }));
}

main().catch((e) => { console.error(e); process.exit(1); });
