"""Encodes and decodes every input file with the Hugging Face `tokenizers`
library and writes the results as JSON lines, one per input:
    {"name": ..., "ids": [...], "plain_ids": [...], "decoded": ..., "decoded_skip": ...}
"ids" use add_special_tokens=True, "plain_ids" False; "decoded" decodes "ids"
with skip_special_tokens=False, "decoded_skip" with True.

    python hf_dump.py <tokenizer.json> <out.jsonl> <input files...>

Inputs are decoded as UTF-8 with U+FFFD per maximal subpart of an invalid
sequence (what weir's Encode does with the raw bytes).
"""

import os
import sys

from tokenizers import Tokenizer

import js_json


def main():
    if len(sys.argv) < 3:
        print('usage: hf_dump.py <tokenizer.json> <out.jsonl> <input files...>', file=sys.stderr)
        return 2
    tokenizer_path, out_path, inputs = sys.argv[1], sys.argv[2], sys.argv[3:]
    tok = Tokenizer.from_file(tokenizer_path)
    with open(out_path, 'w', encoding='utf-8', newline='\n') as out:
        for path in inputs:
            with open(path, 'rb') as f:
                text = f.read().decode('utf-8', 'replace')
            ids = tok.encode(text, add_special_tokens=True).ids
            record = {
                'name': os.path.basename(path),
                'ids': ids,
                'plain_ids': tok.encode(text, add_special_tokens=False).ids,
                'decoded': tok.decode(ids, skip_special_tokens=False),
                'decoded_skip': tok.decode(ids, skip_special_tokens=True),
            }
            out.write(js_json.dumps(record) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
