/**
 * A tar stream of regular files, for PUT …/files with Content-Type:
 * application/x-tar. Names that do not fit a ustar header (longer than
 * 100 bytes, or not ASCII) go in a PAX record, as the server's reader
 * expects; nothing else of the file (owner, times, mode) is sent but mode
 * 0644, which is what the server gives every upload.
 */
import { Readable } from "node:stream";

const BLOCK = 512;
const enc = new TextEncoder();

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

function header(name: string, size: number, type: string): Uint8Array {
  const h = new Uint8Array(BLOCK);
  const put = (s: string, at: number) => h.set(enc.encode(s), at);
  put(name, 0);
  put(octal(0o644, 8), 100);
  put(octal(0, 8), 108);
  put(octal(0, 8), 116);
  put(octal(size, 12), 124);
  put(octal(0, 12), 136);
  put("        ", 148); // the checksum counts its own field as spaces
  put(type, 156);
  put("ustar\0", 257);
  put("00", 263);
  let sum = 0;
  for (const b of h) sum += b;
  put(octal(sum, 7) + " ", 148);
  return h;
}

/** A PAX record: "<length> key=value\n", the length counting itself. */
function paxRecord(key: string, value: string): Uint8Array {
  const body = enc.encode(` ${key}=${value}\n`);
  let n = body.length + 1;
  while (String(n).length + body.length > n) n++;
  return enc.encode(`${String(n)} ${key}=${value}\n`);
}

function padding(size: number): Uint8Array {
  const rest = size % BLOCK;
  return new Uint8Array(rest === 0 ? 0 : BLOCK - rest);
}

function* blocks(files: Array<[string, Uint8Array]>): Generator<Uint8Array> {
  for (const [name, data] of files) {
    const raw = enc.encode(name);
    // 8 GiB is the most 11 octal digits hold.
    const big = data.byteLength >= 8 ** 11;
    if (raw.length > 100 || raw.some((b) => b >= 0x80) || big) {
      const recs = [paxRecord("path", name)];
      if (big) recs.push(paxRecord("size", String(data.byteLength)));
      const pax = Buffer.concat(recs);
      yield header("PaxHeader", pax.length, "x");
      yield pax;
      yield padding(pax.length);
    }
    yield header(raw.length > 100 || raw.some((b) => b >= 0x80) ? "long-name" : name, big ? 0 : data.byteLength, "0");
    yield data;
    yield padding(data.byteLength);
  }
  yield new Uint8Array(2 * BLOCK);
}

/** The tar stream of files, each [name relative to the target, bytes], in order. */
export function tarStream(files: Array<[string, Uint8Array]>): Readable {
  return Readable.from(blocks(files), { objectMode: false });
}
