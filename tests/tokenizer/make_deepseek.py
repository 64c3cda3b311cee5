"""Trains, with the Hugging Face library, a byte-level BPE tokenizer that uses
the DeepSeek-V3/V4 pre-tokenizer (the three Split regexes of the public
tokenizer.json, then ByteLevel without regex), adds DeepSeek-style special
tokens, a BOS template and the ByteLevel decoder, and enables ignore_merges.

    python make_deepseek.py <out tokenizer.json> <training files...>

The trainer is BpeTrainer with its defaults (vocab_size 30000, min_frequency
0, no special tokens, no alphabet limit): what Tokenizer.train(files) takes
from a BPE model when given no trainer, in the Python binding as in the node
one the former make_deepseek.js used. Only its progress bar is turned off.
"""

import json
import os
import sys

from tokenizers import Tokenizer, trainers

import js_json


def split(regex):
    return {'type': 'Split', 'pattern': {'Regex': regex}, 'behavior': 'Isolated', 'invert': False}


PRE_TOKENIZER = {
    'type': 'Sequence',
    'pretokenizers': [
        split('\\p{N}{1,3}'),
        split('[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+'),
        split('[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?'
              '[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+'),
        {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True,
         'use_regex': False},
    ],
}

SPECIALS = ['<\uff5cbegin\u2581of\u2581sentence\uff5c>', '<\uff5cend\u2581of\u2581sentence\uff5c>',
            '<\uff5c\u2581pad\u2581\uff5c>', '<\uff5cUser\uff5c>', '<\uff5cAssistant\uff5c>',
            '<think>', '</think>']


def main():
    if len(sys.argv) < 3:
        print('usage: make_deepseek.py <out tokenizer.json> <training files...>', file=sys.stderr)
        return 2
    out_path, files = sys.argv[1], sys.argv[2:]
    untrained = {
        'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': [],
        'normalizer': None, 'pre_tokenizer': PRE_TOKENIZER, 'post_processor': None,
        'decoder': None,
        'model': {'type': 'BPE', 'dropout': None, 'unk_token': None,
                  'continuing_subword_prefix': None, 'end_of_word_suffix': None,
                  'fuse_unk': False, 'byte_fallback': False, 'ignore_merges': False,
                  'vocab': {}, 'merges': []},
    }
    tok = Tokenizer.from_str(json.dumps(untrained))
    # The trainer reads files as strict UTF-8: give it repaired copies.
    clean = []
    for i, path in enumerate(files):
        copy = '%s.train%d.txt' % (out_path, i)
        with open(path, 'rb') as src, open(copy, 'wb') as dst:
            dst.write(src.read().decode('utf-8', 'replace').encode('utf-8'))
        clean.append(copy)
    tok.train(clean, trainers.BpeTrainer(show_progress=False))
    for copy in clean:
        os.unlink(copy)
    trained = json.loads(tok.to_str())

    next_id = max(trained['model']['vocab'].values()) + 1
    trained['added_tokens'] = [{
        'id': next_id + i, 'content': content, 'single_word': False, 'lstrip': False,
        'rstrip': False,
        'normalized': content.startswith('<think') or content.startswith('</think'),
        'special': 'think' not in content,
    } for i, content in enumerate(SPECIALS)]
    bos = SPECIALS[0]
    trained['post_processor'] = {
        'type': 'TemplateProcessing',
        'single': [{'SpecialToken': {'id': bos, 'type_id': 0}},
                   {'Sequence': {'id': 'A', 'type_id': 0}}],
        'pair': [{'SpecialToken': {'id': bos, 'type_id': 0}},
                 {'Sequence': {'id': 'A', 'type_id': 0}},
                 {'SpecialToken': {'id': bos, 'type_id': 0}},
                 {'Sequence': {'id': 'B', 'type_id': 1}}],
        'special_tokens': {bos: {'id': bos, 'ids': [trained['added_tokens'][0]['id']],
                                 'tokens': [bos]}},
    }
    trained['decoder'] = {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True,
                          'use_regex': True}
    trained['model']['ignore_merges'] = True
    with open(out_path, 'w', encoding='utf-8') as f:
        f.write(js_json.dumps(trained))
    # Round trip through the library so that a malformed file fails here.
    Tokenizer.from_file(out_path)
    return 0


if __name__ == '__main__':
    sys.exit(main())
