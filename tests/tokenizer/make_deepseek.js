// Trains, with the Hugging Face library, a byte-level BPE tokenizer that uses
// the DeepSeek-V3/V4 pre-tokenizer (the three Split regexes of the public
// tokenizer.json, then ByteLevel without regex), adds DeepSeek-style special
// tokens, a BOS template and the ByteLevel decoder, and enables ignore_merges.
//   node make_deepseek.js <node_modules dir> <out tokenizer.json> <training files...>
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesDir, outPath, ...files] = process.argv.slice(2);
const { Tokenizer } = require(path.resolve(modulesDir, 'tokenizers'));

const split = (regex) => ({ type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false });
const preTokenizer = {
  type: 'Sequence',
  pretokenizers: [
    split('\\p{N}{1,3}'),
    split('[一-龥\u3040-ゟ゠-ヿ]+'),
    split('[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+'),
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
  ],
};
const untrained = {
  version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
  pre_tokenizer: preTokenizer, post_processor: null, decoder: null,
  model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: false, byte_fallback: false,
           ignore_merges: false, vocab: {}, merges: [] },
};
const tok = Tokenizer.fromString(JSON.stringify(untrained));
// The trainer reads files as strict UTF-8: give it repaired copies.
const clean = files.map((f, i) => {
  const p = `${outPath}.train${i}.txt`;
  fs.writeFileSync(p, fs.readFileSync(f).toString('utf8'));
  return p;
});
tok.train(clean);
clean.forEach((p) => fs.unlinkSync(p));
const tmp = outPath + '.trained';
tok.save(tmp);
const trained = JSON.parse(fs.readFileSync(tmp, 'utf8'));
fs.unlinkSync(tmp);

let next = Math.max(...Object.values(trained.model.vocab)) + 1;
const specials = ['<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜▁pad▁｜>', '<｜User｜>',
                  '<｜Assistant｜>', '<think>', '</think>'];
trained.added_tokens = specials.map((content) => ({
  id: next++, content, single_word: false, lstrip: false, rstrip: false,
  normalized: content.startsWith('<think') || content.startsWith('</think') ? true : false,
  special: !content.includes('think'),
}));
const bos = specials[0];
trained.post_processor = {
  type: 'TemplateProcessing',
  single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
  pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
         { SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
  special_tokens: { [bos]: { id: bos, ids: [trained.added_tokens[0].id], tokens: [bos] } },
};
trained.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
trained.model.ignore_merges = true;
fs.writeFileSync(outPath, JSON.stringify(trained));
// Round trip through the library so that a malformed file fails here.
Tokenizer.fromFile(outPath);
