"""Builds the Engram compressed vocabulary (spec model-v41.md section 4.7 step
1) of a tokenizer with the Hugging Face library, exactly as the reference
Python does it (decode each id alone, the normalizer sequence below, the
U+FFFD and empty-key fallbacks, first-seen ids), and writes
{"size": N, "map": [compressed id per token id]}.

    python hf_engram.py <tokenizer.json> <out.json>
"""

import json
import sys

from tokenizers import Tokenizer

import js_json

SENTINEL = '\ue000'

NORMALIZER = {
    'type': 'Sequence',
    'normalizers': [
        {'type': 'NFKC'}, {'type': 'NFD'}, {'type': 'StripAccents'}, {'type': 'Lowercase'},
        {'type': 'Replace', 'pattern': {'Regex': '[ \t\r\n]+'}, 'content': ' '},
        {'type': 'Replace', 'pattern': {'Regex': '^ $'}, 'content': SENTINEL},
        {'type': 'Strip', 'strip_left': True, 'strip_right': True},
        {'type': 'Replace', 'pattern': {'String': SENTINEL}, 'content': ' '},
    ],
}


def main():
    if len(sys.argv) != 3:
        print('usage: hf_engram.py <tokenizer.json> <out.json>', file=sys.stderr)
        return 2
    tokenizer_path, out_path = sys.argv[1], sys.argv[2]
    tok = Tokenizer.from_file(tokenizer_path)
    with open(tokenizer_path, encoding='utf-8') as f:
        spec = json.load(f)
    spec['normalizer'] = NORMALIZER
    normalizer = Tokenizer.from_str(json.dumps(spec)).normalizer
    keys = {}
    mapping = []
    for token_id in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([token_id], skip_special_tokens=False)
        if '\ufffd' in text:
            key = tok.id_to_token(token_id) or ''
        else:
            key = normalizer.normalize_str(text) or text
        mapping.append(keys.setdefault(key, len(keys)))
    with open(out_path, 'w', encoding='utf-8') as f:
        f.write(js_json.dumps({'size': len(keys), 'map': mapping}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
