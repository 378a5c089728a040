/**
 * Errors of the airlock API. Every failure the server reports carries one
 * of its kinds; each kind has its own class, so callers can use
 * `instanceof` or compare `err.kind`.
 */

/** The API's error kinds, as `{"error":{"kind":…}}` names them. */
export type ErrorKind =
  | "invalid_input"
  | "unauthorized"
  | "permission_denied"
  | "not_found"
  | "already_exists"
  | "conflict"
  | "over_limit"
  | "canceled"
  | "timeout"
  | "unavailable"
  | "sandbox_lost"
  | "internal";

/** An error the airlock server reported, or a failure to reach it. */
export class AirlockError extends Error {
  /** The API's error kind. */
  readonly kind: ErrorKind;
  /** The HTTP status, 0 when no response arrived. */
  readonly status: number;
  /** The refusal's reason word, when the server gave one (e.g. a file transfer's `is_directory`). */
  readonly reason?: string;

  constructor(kind: ErrorKind, message: string, status = 0, reason?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.kind = kind;
    this.status = status;
    this.reason = reason;
  }
}

export class InvalidInputError extends AirlockError {}
export class UnauthorizedError extends AirlockError {}
export class PermissionDeniedError extends AirlockError {}
export class NotFoundError extends AirlockError {}
export class AlreadyExistsError extends AirlockError {}
/** In use for now: retry shortly. */
export class ConflictError extends AirlockError {}
export class OverLimitError extends AirlockError {}
export class CanceledError extends AirlockError {}
export class TimeoutError extends AirlockError {}
export class UnavailableError extends AirlockError {}
/** The sandbox ended from outside airlock; its work is gone, and a retry is safe. */
export class SandboxLostError extends UnavailableError {}
export class InternalError extends AirlockError {}

const classes: Record<ErrorKind, typeof AirlockError> = {
  invalid_input: InvalidInputError,
  unauthorized: UnauthorizedError,
  permission_denied: PermissionDeniedError,
  not_found: NotFoundError,
  already_exists: AlreadyExistsError,
  conflict: ConflictError,
  over_limit: OverLimitError,
  canceled: CanceledError,
  timeout: TimeoutError,
  unavailable: UnavailableError,
  sandbox_lost: SandboxLostError,
  internal: InternalError,
};

const byStatus: Record<number, ErrorKind> = {
  400: "invalid_input",
  401: "unauthorized",
  403: "permission_denied",
  404: "not_found",
  409: "conflict",
  413: "invalid_input",
  429: "over_limit",
  503: "unavailable",
  504: "timeout",
};

/** Whether s is one of the API's error kinds. */
export function isErrorKind(s: unknown): s is ErrorKind {
  return typeof s === "string" && Object.hasOwn(classes, s);
}

/** The typed error of one kind. */
export function errorOf(kind: ErrorKind, message: string, status = 0, reason?: string, cause?: unknown): AirlockError {
  const C = classes[kind] ?? AirlockError;
  return new C(kind, message, status, reason, cause === undefined ? undefined : { cause });
}

/**
 * The typed error of an error response. body is the raw response body; a
 * body that is not the API's error shape still yields an error, its kind
 * taken from the status.
 */
export function errorFromResponse(status: number, body: string): AirlockError {
  let kind: ErrorKind = byStatus[status] ?? "internal";
  let message = `airlock server answered HTTP ${status}`;
  let reason: string | undefined;
  try {
    const parsed = JSON.parse(body) as { error?: { kind?: unknown; message?: unknown; reason?: unknown } };
    const e = parsed?.error;
    if (e && typeof e === "object") {
      if (isErrorKind(e.kind)) kind = e.kind;
      if (typeof e.message === "string" && e.message !== "") message = e.message;
      if (typeof e.reason === "string" && e.reason !== "") reason = e.reason;
    }
  } catch {
    const text = body.trim().slice(0, 500);
    if (text) message += `: ${text}`;
  }
  return errorOf(kind, message, status, reason);
}
