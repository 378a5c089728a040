/**
 * Interactive execs over the exec WebSocket (/v1/sandboxes/{id}/exec/ws):
 * stdin fed while the program runs, kill, and a reconnect after a dropped
 * connection that resumes the output with no byte lost or repeated. Node
 * 20 has no stable WebSocket of its own, so this uses `ws`.
 */
import WebSocket from "ws";
import { AirlockError, errorFromResponse, errorOf, isErrorKind } from "./errors.js";
import { type Transport, MAX_ERROR_BODY_BYTES, bytes, readHead } from "./transport.js";
import type { Result, Schemas } from "./sandbox.js";

/** The callbacks and retry budget of Sandbox.spawn. */
export interface SpawnOptions {
  onStdout?: (chunk: Buffer) => void;
  onStderr?: (chunk: Buffer) => void;
  /** How many times to reconnect after a dropped connection (default 5). */
  reconnects?: number;
}

interface ServerEvent {
  type?: string;
  exec_id?: string;
  data_b64?: string;
  offset?: number;
  result?: Result;
  error?: { kind?: unknown; message?: unknown; reason?: unknown };
}

/** A running exec. `result` settles with its Result once it ends. */
export class ExecHandle {
  /** The server's exec id, once started. */
  execId?: string;
  /** The Result, once the program ended. */
  readonly result: Promise<Result>;
  readonly #t: Transport;
  readonly #path: string;
  readonly #opts: SpawnOptions;
  readonly #got = [0, 0];
  #ws?: WebSocket;
  #done = false;
  #reconnectsLeft: number;
  #resolve!: (r: Result) => void;
  #reject!: (e: unknown) => void;
  #queue: string[] = [];
  #started: Promise<string>;
  #startedResolve!: (id: string) => void;

  /** @internal Use Sandbox.spawn. */
  constructor(t: Transport, sandboxId: string, body: Schemas["ExecRequest"], opts: SpawnOptions) {
    this.#t = t;
    this.#path = `/v1/sandboxes/${encodeURIComponent(sandboxId)}/exec/ws`;
    this.#opts = opts;
    this.#reconnectsLeft = opts.reconnects ?? 5;
    this.result = new Promise((res, rej) => {
      this.#resolve = res;
      this.#reject = rej;
    });
    this.result.catch(() => {});
    this.#started = new Promise((res) => {
      this.#startedResolve = res;
    });
    this.#connect({ type: "execute", ...body });
  }

  /** Wait until the exec has started (the server named it). */
  started(): Promise<string> {
    return Promise.race([this.#started, this.result.then(() => this.execId ?? "")]);
  }

  /** Send bytes to the program's stdin. */
  write(data: string | Uint8Array): void {
    this.#send({ type: "input", data_b64: Buffer.from(typeof data === "string" ? Buffer.from(data, "utf8") : data).toString("base64") });
  }

  /** End the program's stdin. */
  closeStdin(): void {
    this.#send({ type: "close_stdin" });
  }

  /** Kill the program; its Result then says `killed`. */
  kill(): void {
    this.#send({ type: "kill" });
  }

  #send(msg: object): void {
    if (this.#done) throw errorOf("invalid_input", "the exec has ended");
    const text = JSON.stringify(msg);
    if (this.#ws?.readyState === WebSocket.OPEN && this.execId) this.#ws.send(text);
    else this.#queue.push(text);
  }

  #connect(first: object): void {
    const headers: Record<string, string> = {};
    const auth = this.#t.authorization;
    if (auth) headers["authorization"] = auth;
    const url = this.#t.base
      ? new URL(this.#path, this.#t.base).toString().replace(/^http/, "ws")
      : `ws+unix://${this.#t.socketPath}:${this.#path}`;
    const max = this.#t.maxJsonBytes;
    const ws = new WebSocket(url, { headers, perMessageDeflate: false, maxPayload: max });
    this.#ws = ws;
    let opened = false;
    ws.on("open", () => {
      opened = true;
      ws.send(JSON.stringify(first));
    });
    ws.on("unexpected-response", (_req, res) => {
      const fail = (body: Buffer) => {
        this.#fail(errorFromResponse(res.statusCode ?? 0, body.toString("utf8")));
        ws.terminate();
      };
      readHead(res, MAX_ERROR_BODY_BYTES).then(fail, () => fail(Buffer.alloc(0)));
    });
    ws.on("message", (data) => this.#onMessage(data.toString()));
    ws.on("error", (err: Error & { code?: string }) => {
      // A message past maxPayload would be met again on a reconnect.
      if (err.code === "WS_ERR_UNSUPPORTED_MESSAGE_LENGTH") {
        this.#fail(
          errorOf(
            "internal",
            `a message on the exec's WebSocket passed ${bytes(max)}, the most this client takes (maxJsonBytes): ` +
              "an exec's output limit asks for more; raise maxJsonBytes if it is expected",
          ),
        );
      }
      // Otherwise "close" follows and decides.
    });
    ws.on("close", () => {
      if (this.#done) return;
      if (!opened && !this.execId) {
        this.#fail(errorOf("unavailable", `reaching airlock's exec WebSocket at ${this.#t.where} failed`));
        return;
      }
      if (!this.execId || this.#reconnectsLeft <= 0) {
        this.#fail(errorOf("unavailable", "the exec's WebSocket closed before its exit event, and reconnecting did not help"));
        return;
      }
      this.#reconnectsLeft--;
      const execId = this.execId;
      this.execId = undefined;
      setTimeout(() => this.#connect({ type: "reconnect", exec_id: execId, stdout_offset: this.#got[0], stderr_offset: this.#got[1] }), 100);
    });
  }

  #onMessage(text: string): void {
    let ev: ServerEvent;
    try {
      ev = JSON.parse(text) as ServerEvent;
    } catch {
      this.#fail(errorOf("internal", `the exec WebSocket sent a message that is not JSON: ${text.slice(0, 200)}`));
      return;
    }
    switch (ev.type) {
      case "started":
        this.execId = ev.exec_id;
        if (ev.exec_id) this.#startedResolve(ev.exec_id);
        for (const m of this.#queue.splice(0)) this.#ws?.send(m);
        break;
      case "stdout":
      case "stderr": {
        const i = ev.type === "stdout" ? 0 : 1;
        let chunk = Buffer.from(ev.data_b64 ?? "", "base64");
        const offset = typeof ev.offset === "number" ? ev.offset : this.#got[i];
        // Skip what was already delivered before a reconnect.
        if (offset < this.#got[i]) chunk = chunk.subarray(this.#got[i] - offset);
        else if (offset > this.#got[i]) {
          this.#fail(errorOf("internal", `the exec's ${ev.type} skipped from byte ${this.#got[i]} to ${offset}`));
          return;
        }
        if (chunk.length === 0) break;
        this.#got[i] += chunk.length;
        (i === 0 ? this.#opts.onStdout : this.#opts.onStderr)?.(chunk);
        break;
      }
      case "exit":
        this.#done = true;
        if (ev.result) this.#resolve(ev.result);
        else this.#reject(errorOf("internal", "the server's exit event carries no result"));
        this.#ws?.close();
        break;
      case "error": {
        const e = ev.error ?? {};
        this.#fail(errorOf(isErrorKind(e.kind) ? e.kind : "internal", typeof e.message === "string" ? e.message : "the exec failed", 0, typeof e.reason === "string" ? e.reason : undefined));
        break;
      }
      default:
        break;
    }
  }

  #fail(err: AirlockError): void {
    if (this.#done) return;
    this.#done = true;
    this.#reject(err);
    this.#ws?.terminate();
  }
}
