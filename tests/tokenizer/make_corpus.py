"""Builds the parity corpus: real multilingual text found in Debian packages on
this machine (licenses, documentation, C headers, gettext translations) plus
adversarial inputs. Every input is one file; weir and Hugging Face read the
same bytes.

    python make_corpus.py <out dir>

The bytes are those the former make_corpus.js wrote on the same machine:
directory entries sorted by UTF-16 code units (JavaScript string order),
names decoded as UTF-8 with U+FFFD (as node does), symbolic links skipped,
.mo strings decoded with U+FFFD per maximal subpart.
"""

import os
import re
import struct
import sys

MAX_FILE = 192 * 1024


class Corpus:
    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.total = 0
        os.makedirs(out_dir, exist_ok=True)

    def write(self, name, data):
        with open(os.path.join(self.out_dir, name), 'wb') as f:
            f.write(data)
        self.total += len(data)

    def pack(self, prefix, files, budget):
        """Concatenates files into inputs of at most MAX_FILE bytes, up to
        `budget`; a file cut at a chunk's end is not continued in the next."""
        chunk, size, index, used = [], 0, 0, 0

        def flush():
            nonlocal chunk, size, index
            if size > 0:
                self.write('%s_%d.txt' % (prefix, index), b''.join(chunk))
                index += 1
            chunk, size = [], 0

        for f in files:
            if used >= budget:
                break
            try:
                with open(f, 'rb') as fh:
                    data = fh.read()
            except OSError:
                continue
            data = data[:min(len(data), MAX_FILE - size, budget - used)]
            chunk.append(data)
            size += len(data)
            used += len(data)
            if size >= MAX_FILE:
                flush()
        flush()


def utf16_key(name):
    return name.encode('utf-16-be', 'surrogatepass')


def list_files(top, accept, limit):
    """Regular files (not links) under `top` whose path `accept`s, depth
    first in name order, at most `limit`."""
    out = []

    def walk(d):
        try:
            with os.scandir(os.fsencode(d)) as it:
                entries = [(e.name.decode('utf-8', 'replace'), e) for e in it]
        except OSError:
            return
        entries.sort(key=lambda ne: utf16_key(ne[0]))
        for name, e in entries:
            if len(out) >= limit:
                return
            p = os.path.join(d, name)
            try:
                is_dir = e.is_dir(follow_symlinks=False)
                is_file = e.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                walk(p)
            elif is_file and accept(p):
                out.append(p)

    walk(top)
    return out


def mo_strings(path):
    """The translated strings of a gettext .mo file, one per line (the
    header entry, index 0, is left out)."""
    with open(path, 'rb') as f:
        b = f.read()
    if len(b) < 28:
        return ''
    order = '<' if struct.unpack_from('<I', b, 0)[0] == 0x950412de else '>'

    def rd(offset):
        return struct.unpack_from(order + 'I', b, offset)[0]

    n, table = rd(8), rd(16)
    parts = []
    i = 1
    while i < n and table + 8 * i + 8 <= len(b):
        length, offset = rd(table + 8 * i), rd(table + 8 * i + 4)
        if offset + length <= len(b):
            parts.append(b[offset:offset + length].decode('utf-8', 'replace'))
        i += 1
    return '\n'.join(parts)


LANGS = ['zh_CN', 'zh_TW', 'ja', 'ko', 'ru', 'uk', 'ar', 'he', 'fa', 'hi', 'bn', 'ta', 'th',
         'vi', 'el', 'ka', 'hy', 'am', 'de', 'fr', 'es', 'pt_BR', 'pl', 'tr', 'cs', 'fi']

EMOJI = ['\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466',  # family
         '\U0001f3f3\ufe0f\u200d\U0001f308',  # rainbow flag
         '\U0001f44d\U0001f3fd',  # thumbs up, skin tone
         '\U0001f1ef\U0001f1f5\U0001f1fa\U0001f1f8',  # two flags
         '1\ufe0f\u20e3',  # keycap
         '\U0001f9d1\U0001f3ff\u200d\U0001f680',  # astronaut
         '\u2764\ufe0f\u200d\U0001f525',  # heart on fire
         '\U0001f469\u200d\u2764\ufe0f\u200d\U0001f48b\u200d\U0001f468',  # kiss
         '\u200d\u200d',
         '\U0001fae0']  # melting face

SPECIALS = ['<|endoftext|>', '<\uff5cbegin\u2581of\u2581sentence\uff5c>',
            '<\uff5cend\u2581of\u2581sentence\uff5c>', '<\uff5cUser\uff5c>',
            '<\uff5cAssistant\uff5c>', '<|bos|>', '<|eos|>', '<|user|>', '<|assistant|>',
            '<think>', '</think>']

# '\u1100\u1161\u11a8' is one syllable as conjoining jamo (NFC makes it U+AC01).
EDGE = ['e\u0301', 'A\u030A', '\u0085', '\u2028', '\u2029', '\u00a0', '\ufeff', '\u1680',
        '\u3000', '\u200b', '\uff46\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48',
        '\U0001d400\U0001d401\U0001d402', '\ufb01', '\u2460\u2461', '\u216b', '\u00bd', "it's",
        "I'LL", '\u202e', '\u0301\u0301', '\ud55c\uad6d\uc5b4', '\u1100\u1161\u11a8', '\u00f1',
        '\u0663\u0664\u0665', '\u0967\u0968\u0969', '\U0001d7d8\U0001d7d9', "'s'S", '\t\t',
        '  \n']


def adversarial(corpus):
    corpus.write('adv_one_char_1mb.txt', b'a' * (1 << 20))
    corpus.write('adv_digits.txt', b'7' * (64 * 1024))
    corpus.write('adv_spaces.txt', b' ' * (64 * 1024))
    corpus.write('adv_newlines.txt', b'\r\n\n \n\t\n' * 8000)
    corpus.write('adv_accents.txt', '\u00e9'.encode() * (1 << 17))
    invalid = []
    for i in range(2000):
        invalid += [('word%d ' % i).encode(), bytes([0x80 + i % 64]),
                    bytes([0xC0, 0xAF, 0xED, 0xA0, 0x80, 0xE2, 0x82, 0x20, 0xF4, 0x90, 0x80,
                           0x80, 0xF0, 0x9F, 0x98, 0xFF, 0xFE, 0xC3]),
                    'ok \u00e9 \u65e5\u672c '.encode(), bytes([0xE6, 0x97])]
    corpus.write('adv_invalid_utf8.bin', b''.join(invalid))
    control = bytearray()
    for i in range(4000):
        control += bytes([i % 32, 0x7f, 0x41 + i % 26, 0x20])
    corpus.write('adv_control.bin', bytes(control))
    em = ''.join(EMOJI[i % len(EMOJI)] + (' ' if i % 7 == 0 else '') +
                 ('x' if i % 13 == 0 else '') for i in range(3000))
    corpus.write('adv_emoji.txt', em.encode())
    sp = []
    for i in range(4000):
        s = SPECIALS[i % len(SPECIALS)]
        sp.append([s, ' %s ' % s, 'x%sy' % s, s + s, s[:-1], '\n%s\n' % s,
                   '  %sword' % s][i % 7])
    corpus.write('adv_specials.txt', ''.join(sp).encode())
    ed = ''.join(EDGE[(i * 7) % len(EDGE)] + (' ' if i % 3 == 0 else '') for i in range(20000))
    corpus.write('adv_unicode_edge.txt', ed.encode())
    corpus.write('adv_empty.txt', b'')


def main():
    if len(sys.argv) != 2:
        print('usage: make_corpus.py <out dir>', file=sys.stderr)
        return 2
    corpus = Corpus(sys.argv[1])
    doc = re.compile(r'README|copyright\Z|\.txt\Z|\.md\Z')
    corpus.pack('license', list_files('/usr/share/common-licenses', lambda p: True, 100),
                160 * 1024)
    corpus.pack('doc', list_files('/usr/share/doc', lambda p: doc.search(p) is not None, 4000),
                480 * 1024)
    corpus.pack('vimdoc', list_files('/usr/share/vim', lambda p: p.endswith('.txt'), 400),
                192 * 1024)
    corpus.pack('source', list_files('/usr/include', lambda p: p.endswith(('.h', '.hpp')), 3000),
                320 * 1024)

    for lang in LANGS:
        files = list_files('/usr/share/locale/%s/LC_MESSAGES' % lang,
                           lambda p: p.endswith('.mo'), 200)
        text, text_bytes = [], 0
        for f in files:
            if text_bytes > 40 * 1024:
                break
            try:
                strings = mo_strings(f) + '\n'
            except (OSError, struct.error):
                continue  # unreadable catalog
            text.append(strings)
            text_bytes += len(strings.encode())
        if text:
            corpus.write('mo_%s.txt' % lang, ''.join(text).encode())

    adversarial(corpus)
    print('corpus: %d inputs, %d bytes' % (len(os.listdir(corpus.out_dir)), corpus.total))
    return 0


if __name__ == '__main__':
    sys.exit(main())
