// Builds the parity corpus: real multilingual text found in Debian packages
// on this machine (licenses, documentation, C headers, gettext translations)
// plus adversarial inputs. Every input is one file; weir and Hugging Face read
// the same bytes.
//   node make_corpus.js <out dir>
'use strict';
const fs = require('fs');
const path = require('path');

const outDir = process.argv[2];
fs.mkdirSync(outDir, { recursive: true });
const kMaxFile = 192 * 1024;
let total = 0;

function write(name, data) {
  fs.writeFileSync(path.join(outDir, name), data);
  total += data.length;
}

function listFiles(dir, filter, limit) {
  const out = [];
  const walk = (d) => {
    let entries;
    try { entries = fs.readdirSync(d, { withFileTypes: true }); } catch (e) { return; }
    entries.sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const e of entries) {
      if (out.length >= limit) return;
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isFile() && filter(p)) out.push(p);
    }
  };
  walk(dir);
  return out;
}

// Concatenates files into inputs of at most kMaxFile bytes, up to `budget`.
function pack(prefix, files, budget) {
  let chunk = [], size = 0, index = 0, used = 0;
  const flush = () => {
    if (size > 0) write(`${prefix}_${index++}.txt`, Buffer.concat(chunk));
    chunk = []; size = 0;
  };
  for (const f of files) {
    if (used >= budget) break;
    let data;
    try { data = fs.readFileSync(f); } catch (e) { continue; }
    data = data.subarray(0, Math.min(data.length, kMaxFile - size, budget - used));
    chunk.push(data); size += data.length; used += data.length;
    if (size >= kMaxFile) flush();
  }
  flush();
}

// Returns the translated strings of a gettext .mo file, one per line.
function moStrings(file) {
  const b = fs.readFileSync(file);
  if (b.length < 28) return '';
  const magic = b.readUInt32LE(0);
  const rd = magic === 0x950412de ? (o) => b.readUInt32LE(o) : (o) => b.readUInt32BE(o);
  const n = rd(8), table = rd(16);
  const parts = [];
  for (let i = 1; i < n && table + 8 * i + 8 <= b.length; ++i) {
    const len = rd(table + 8 * i), off = rd(table + 8 * i + 4);
    if (off + len <= b.length) parts.push(b.subarray(off, off + len).toString('utf8'));
  }
  return parts.join('\n');
}

pack('license', listFiles('/usr/share/common-licenses', () => true, 100), 160 * 1024);
pack('doc', listFiles('/usr/share/doc', (p) => /README|copyright$|\.txt$|\.md$/.test(p), 4000),
     480 * 1024);
pack('vimdoc', listFiles('/usr/share/vim', (p) => p.endsWith('.txt'), 400), 192 * 1024);
pack('source', listFiles('/usr/include', (p) => /\.(h|hpp)$/.test(p), 3000), 320 * 1024);

const langs = ['zh_CN', 'zh_TW', 'ja', 'ko', 'ru', 'uk', 'ar', 'he', 'fa', 'hi', 'bn', 'ta', 'th',
               'vi', 'el', 'ka', 'hy', 'am', 'de', 'fr', 'es', 'pt_BR', 'pl', 'tr', 'cs', 'fi'];
for (const lang of langs) {
  const files = listFiles(`/usr/share/locale/${lang}/LC_MESSAGES`, (p) => p.endsWith('.mo'), 200);
  let text = '';
  for (const f of files) {
    if (Buffer.byteLength(text) > 40 * 1024) break;
    try { text += moStrings(f) + '\n'; } catch (e) { /* unreadable catalog: skip */ }
  }
  if (text.length > 0) write(`mo_${lang}.txt`, Buffer.from(text, 'utf8'));
}

// Adversarial inputs.
write('adv_one_char_1mb.txt', Buffer.alloc(1 << 20, 'a'));
write('adv_digits.txt', Buffer.alloc(64 * 1024, '7'));
write('adv_spaces.txt', Buffer.alloc(64 * 1024, ' '));
write('adv_newlines.txt', Buffer.from('\r\n\n \n\t\n'.repeat(8000)));
write('adv_accents.txt', Buffer.from('é'.repeat(1 << 17)));
const invalid = [];
for (let i = 0; i < 2000; ++i) {
  invalid.push(Buffer.from(`word${i} `), Buffer.from([0x80 + (i % 64)]),
               Buffer.from([0xC0, 0xAF, 0xED, 0xA0, 0x80, 0xE2, 0x82, 0x20, 0xF4, 0x90, 0x80,
                            0x80, 0xF0, 0x9F, 0x98, 0xFF, 0xFE, 0xC3]),
               Buffer.from('ok é 日本 '), Buffer.from([0xE6, 0x97]));
}
write('adv_invalid_utf8.bin', Buffer.concat(invalid));
const control = [];
for (let i = 0; i < 4000; ++i) control.push(i % 32, 0x7f, 0x41 + (i % 26), 0x20);
write('adv_control.bin', Buffer.from(control));
const emoji = ['👨‍👩‍👧‍👦', '🏳️‍🌈', '👍🏽', '🇯🇵🇺🇸', '1️⃣', '🧑🏿‍🚀', '❤️‍🔥', '👩‍❤️‍💋‍👨', '\u200d\u200d', '🫠'];
let em = '';
for (let i = 0; i < 3000; ++i) em += emoji[i % emoji.length] + (i % 7 === 0 ? ' ' : '') + (i % 13 === 0 ? 'x' : '');
write('adv_emoji.txt', Buffer.from(em));
const specials = ['<|endoftext|>', '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜User｜>',
                  '<｜Assistant｜>', '<|bos|>', '<|eos|>', '<|user|>', '<|assistant|>', '<think>', '</think>'];
let sp = '';
for (let i = 0; i < 4000; ++i) {
  const s = specials[i % specials.length];
  sp += [`${s}`, ` ${s} `, `x${s}y`, `${s}${s}`, s.slice(0, -1), `\n${s}\n`, `  ${s}word`][i % 7];
}
write('adv_specials.txt', Buffer.from(sp));
const edge = ['e\u0301', 'A\u030A', '\u0085', '\u2028', '\u2029', '\u00a0', '\ufeff', '\u1680',
              '\u3000', '\u200b', 'ｆｕｌｌｗｉｄｔｈ', '𝐀𝐁𝐂', 'ﬁ', '①②', 'Ⅻ', '½', "it's", "I'LL",
              '\u202e', '\u0301\u0301', '한국어', '각', 'ñ', '٣٤٥', '१२३', '𝟘𝟙', "'s'S", '\t\t', '  \n'];
let ed = '';
for (let i = 0; i < 20000; ++i) ed += edge[(i * 7) % edge.length] + (i % 3 === 0 ? ' ' : '');
write('adv_unicode_edge.txt', Buffer.from(ed));
write('adv_empty.txt', Buffer.alloc(0));
console.log(`corpus: ${fs.readdirSync(outDir).length} inputs, ${total} bytes`);
