"""Encodes and decodes every input file with the Hugging Face `tokenizers`
library and writes the results as JSON lines, one per input:
    {"name": ..., "ids": [...], "plain_ids": [...], "decoded": ..., "decoded_skip": ...}
"ids" use add_special_tokens=True, "plain_ids" False; "decoded" decodes "ids"
with skip_special_tokens=False, "decoded_skip" with True.

    python hf_dump.py <tokenizer.json> <out.jsonl> <input files...>
    python hf_dump.py --lines <tokenizer.json> <out.jsonl> <input files...>

With --lines each input is split at LF and each line encoded on its own
(add_special_tokens=False): {"name": ..., "lines": [[ids...], ...]}.

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
    args = sys.argv[1:]
    by_line = args[0] == '--lines'
    if by_line:
        args = args[1:]
    tokenizer_path, out_path, inputs = args[0], args[1], args[2:]
    tok = Tokenizer.from_file(tokenizer_path)
    with open(out_path, 'w', encoding='utf-8', newline='\n') as out:
        for path in inputs:
            with open(path, 'rb') as f:
                text = f.read().decode('utf-8', 'replace')
            if by_line:
                encodings = tok.encode_batch(text.split('\n'), add_special_tokens=False)
                record = {'name': os.path.basename(path), 'lines': [e.ids for e in encodings]}
                out.write(js_json.dumps(record) + '\n')
                continue
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
