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

/** One entry of a tar stream read by untar. */
export interface TarEntry {
  name: string;
  /** The type flag: "0" for a regular file, "5" for a directory, … */
  type: string;
  data: Buffer;
}

function cstring(b: Buffer): string {
  const nul = b.indexOf(0);
  return b.subarray(0, nul < 0 ? b.length : nul).toString("utf8");
}

/**
 * A numeric header field: octal, or base-256 as Go writes sizes past
 * 8 GiB without PAX. NaN for what is not a number of 0 or more: garbage,
 * or a negative base-256 value (its first byte 0xff).
 */
function numeric(b: Buffer): number {
  if (b[0] & 0x80) {
    if (b[0] & 0x40) return NaN;
    let n = b[0] & 0x3f;
    for (let i = 1; i < b.length; i++) n = n * 256 + b[i];
    return n;
  }
  const s = cstring(b).trim();
  if (s === "") return 0;
  return /^[0-7]+$/.test(s) ? parseInt(s, 8) : NaN;
}

/** The records of a PAX header's data. */
function paxRecords(data: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let off = 0;
  while (off < data.length) {
    const sp = data.indexOf(0x20, off);
    if (sp < 0) break;
    const n = parseInt(data.subarray(off, sp).toString("ascii"), 10);
    if (!(n > 0)) break;
    const rec = data.subarray(sp + 1, off + n - 1).toString("utf8");
    const eq = rec.indexOf("=");
    if (eq > 0) out.set(rec.slice(0, eq), rec.slice(eq + 1));
    off += n;
  }
  return out;
}

/**
 * The entries of a whole tar stream: ustar names with their prefix, PAX
 * path and size records, base-256 sizes. A stream cut inside an entry, a
 * header whose checksum fails, or a size that is not a whole number of 0
 * or more (a negative size would send the reader back, forever) is an
 * Error.
 */
export function untar(buf: Buffer): TarEntry[] {
  const out: TarEntry[] = [];
  let pax = new Map<string, string>();
  let off = 0;
  while (off + BLOCK <= buf.length) {
    const h = buf.subarray(off, off + BLOCK);
    if (h.every((b) => b === 0)) return out;
    let sum = 0;
    for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : h[i];
    if (sum !== numeric(h.subarray(148, 156))) throw new Error(`tar: a bad header checksum at byte ${off}`);
    const type = String.fromCharCode(h[156] || 0x30);
    let name = cstring(h.subarray(0, 100));
    const prefix = h.subarray(257, 263).toString("latin1") === "ustar\0" ? cstring(h.subarray(345, 500)) : "";
    if (prefix) name = prefix + "/" + name;
    const raw = pax.get("size");
    const size = raw === undefined ? numeric(h.subarray(124, 136)) : /^[0-9]+$/.test(raw) ? Number(raw) : NaN;
    const entry = JSON.stringify(pax.get("path") ?? name);
    if (!Number.isSafeInteger(size) || size < 0) {
      const said = raw === undefined ? `header size field, hex ${h.subarray(124, 136).toString("hex")}` : `PAX size ${JSON.stringify(raw)}`;
      throw new Error(`tar: the entry ${entry} at byte ${off} has a size that is not a whole number of bytes (${said}): the server's tar stream is malformed`);
    }
    const start = off + BLOCK;
    if (start + size > buf.length) {
      throw new Error(`tar: the stream ends inside ${entry}, which says it has ${size} bytes and ${buf.length - start} are left: the server's tar stream is cut or malformed`);
    }
    const data = buf.subarray(start, start + size);
    const next = start + Math.ceil(size / BLOCK) * BLOCK;
    if (!(next > off)) throw new Error(`tar: the entry ${entry} at byte ${off} does not move the stream on: the server's tar stream is malformed`);
    off = next;
    if (type === "x") {
      pax = paxRecords(data);
      continue;
    }
    if (type === "g") continue;
    out.push({ name: pax.get("path") ?? name, type, data });
    pax = new Map();
  }
  throw new Error("tar: the stream ends without its end blocks");
}
