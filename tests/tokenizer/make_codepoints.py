"""Writes the code point parity inputs: every code point assigned in the
Unicode version of `unicodedata2` (16.0.0, pinned in
tools/python/requirements.txt; surrogates and U+000A excepted) in a few
contexts, one instance per line (LF-separated), in a few files per context.

    python make_codepoints.py <out dir>

Contexts ({c} = the code point): "a{c}b" (inside a word), " {c}'s" (after a
space, before a contraction), "{c}{c}1" (a run, then a digit). hf_dump.py
--lines and parity_check --lines compare each line on its own.
"""

import os
import sys

import unicodedata2

CONTEXTS = {'word': 'a{c}b', 'space': ' {c}\'s', 'run': '{c}{c}1'}
PER_FILE = 40000


def assigned():
    for cp in range(0x110000):
        if cp == 0x0A or 0xD800 <= cp <= 0xDFFF:
            continue
        if unicodedata2.category(chr(cp)) != 'Cn':
            yield chr(cp)


def main():
    if len(sys.argv) != 2:
        print('usage: make_codepoints.py <out dir>', file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    chars = list(assigned())
    for name, template in CONTEXTS.items():
        for k in range(0, len(chars), PER_FILE):
            lines = [template.replace('{c}', c) for c in chars[k:k + PER_FILE]]
            path = os.path.join(out, 'cp_%s_%02d.txt' % (name, k // PER_FILE))
            with open(path, 'w', encoding='utf-8', newline='\n') as f:
                f.write('\n'.join(lines))
    print('%d code points (Unicode %s) x %d contexts' % (len(chars), unicodedata2.unidata_version,
                                                         len(CONTEXTS)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
