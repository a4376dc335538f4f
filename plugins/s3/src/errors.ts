/**
 * Classifies what the S3 client throws into hypsink's error codes, and keeps
 * secrets out of every message. The raw SDK error is never attached as `cause`:
 * it may carry the access key id (InvalidAccessKeyId, SignatureDoesNotMatch
 * bodies echo it) and the provided signature, and loggers serialize causes.
 */
import { HypsinkError } from 'hypsink/plugin';

export type FaultKind = 'retryable' | 'auth' | 'noBucket' | 'destination' | 'aborted';

export interface Fault {
  readonly kind: FaultKind;
  readonly status: number | undefined;
  /** S3 error code (SlowDown, NoSuchBucket, ...) or network code (ECONNRESET, ...). */
  readonly code: string;
  /** Status, code and the store's message, redacted. */
  readonly summary: string;
  readonly retryAfterMs: number | undefined;
  readonly requestId: string | undefined;
}

interface SdkLikeError {
  name?: unknown;
  code?: unknown;
  message?: unknown;
  $metadata?: { httpStatusCode?: number; requestId?: string };
  $response?: { headers?: Record<string, string | undefined> };
}

function asSdk(e: unknown): SdkLikeError {
  return typeof e === 'object' && e !== null ? (e as SdkLikeError) : {};
}

export function httpStatus(e: unknown): number | undefined {
  const s = asSdk(e).$metadata?.httpStatusCode;
  return typeof s === 'number' ? s : undefined;
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

/** The most specific code: S3's (`SlowDown`), else the socket's (`ECONNRESET`), else the error name. */
export function errorCode(e: unknown): string {
  const x = asSdk(e);
  const name = str(x.name);
  const code = str(x.code);
  if (name && name !== 'Error' && name !== 'Unknown' && name !== 'TimeoutError' && name !== 'NotFound') return name;
  if (code) return code;
  return name || 'Error';
}

export function isPreconditionFailed(e: unknown): boolean {
  return httpStatus(e) === 412 || asSdk(e).name === 'PreconditionFailed';
}

/** HeadObject's 404 has no body, so a missing key and a missing bucket look alike here. */
export function isNotFound(e: unknown): boolean {
  return httpStatus(e) === 404 && asSdk(e).name !== 'NoSuchBucket';
}

export function isNoSuchUpload(e: unknown): boolean {
  return asSdk(e).name === 'NoSuchUpload';
}

const RETRYABLE_CODES = new Set([
  'SlowDown',
  'Throttling',
  'ThrottlingException',
  'ThrottledException',
  'RequestThrottled',
  'RequestThrottledException',
  'TooManyRequestsException',
  'RequestLimitExceeded',
  'BandwidthLimitExceeded',
  'RequestTimeout',
  'RequestTimeoutException',
  'InternalError',
  'ServiceUnavailable',
  'OperationAborted',
  'ConditionalRequestConflict',
  // The SDK corrects its clock offset from this answer, so the next try passes.
  'RequestTimeTooSkewed',
  'TimeoutError',
  'NetworkingError',
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
]);

const AUTH_CODES = new Set([
  'AccessDenied',
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'ExpiredToken',
  'InvalidToken',
  'TokenRefreshRequired',
  'InvalidSecurity',
  'AccountProblem',
  'CredentialsProviderError',
]);

/** Seconds or an HTTP date; undefined when absent or unparsable. */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+(\.\d+)?$/.test(v)) return Math.round(Number(v) * 1000);
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, t - now);
}

function secretValues(): string[] {
  return [process.env.AWS_ACCESS_KEY_ID, process.env.AWS_SECRET_ACCESS_KEY, process.env.AWS_SESSION_TOKEN].filter(
    (v): v is string => typeof v === 'string' && v.length >= 4,
  );
}

/** Removes credentials and signatures from text that may echo a request. */
export function redact(text: string): string {
  let out = text;
  for (const s of secretValues()) out = out.split(s).join('[redacted]');
  return out
    .replace(/(authorization\s*[:=]\s*)[^\n]*/gi, '$1[redacted]')
    .replace(/((?:X-Amz-)?(?:Signature|Credential|Security-Token))=[^&,\s"'<]+/gi, '$1=[redacted]')
    .replace(/\b(?:AKIA|ASIA|AROA|AIDA)[A-Z0-9]{12,}\b/g, '[redacted]');
}

function summarize(status: number | undefined, code: string, message: string): string {
  const parts: string[] = [];
  if (status !== undefined) parts.push(`HTTP ${status}`);
  if (code && code !== 'Error' && code !== 'Unknown') parts.push(code);
  const msg = redact(message).trim();
  if (msg && msg !== 'UnknownError' && msg !== code) parts.push(`(${msg})`);
  return parts.join(' ') || 'unknown error';
}

export function classify(e: unknown, signal?: AbortSignal): Fault {
  const x = asSdk(e);
  const status = httpStatus(e);
  const code = errorCode(e);
  const name = str(x.name);
  const summary = summarize(status, code, str(x.message));
  const retryAfterMs = parseRetryAfter(x.$response?.headers?.['retry-after']);
  const requestId = x.$metadata?.requestId;
  const fault = (kind: FaultKind): Fault => ({ kind, status, code, summary, retryAfterMs, requestId });

  if (signal?.aborted || name === 'AbortError') return fault(signal?.aborted ? 'aborted' : 'retryable');
  if (name === 'NoSuchBucket') return fault('noBucket');
  if (status === 401 || status === 403 || AUTH_CODES.has(code)) {
    return code === 'RequestTimeTooSkewed' ? fault('retryable') : fault('auth');
  }
  if (RETRYABLE_CODES.has(code) || RETRYABLE_CODES.has(str(x.code))) return fault('retryable');
  // 501 Not Implemented will not pass on its own.
  if (status !== undefined && status >= 500 && status !== 501) return fault('retryable');
  if (status === 408 || status === 429) return fault('retryable');
  if (status === undefined) {
    // No answer from the store and not a known socket code: treat as a network fault.
    return fault('retryable');
  }
  return fault('destination');
}

export interface ErrorContext {
  readonly sink: string;
  readonly bucket: string;
  /** `s3://bucket/prefix/key` */
  readonly where: string;
  readonly op: string;
  readonly attempts: number;
  /** No request of the unit's put reached the store (LLP 0070). */
  readonly unsent?: boolean;
}

/** A cause safe to log: what happened, never what was sent. */
function safeCause(f: Fault): Error {
  const c = new Error(f.summary);
  c.name = 'S3Fault';
  return Object.assign(c, { code: f.code, status: f.status, requestId: f.requestId });
}

export function toHypsinkError(f: Fault, ctx: ErrorContext): HypsinkError {
  const head = `sink "${ctx.sink}": ${ctx.op} ${ctx.where}`;
  const cause = safeCause(f);
  switch (f.kind) {
    case 'aborted':
      return new HypsinkError(
        'HYPSINK_ERR_ABORTED',
        `${head} was interrupted by shutdown; the unit is shipped again under the same key on the next run.`,
        { cause },
      );
    case 'retryable': {
      const network = f.status === undefined;
      return new HypsinkError(
        'HYPSINK_ERR_RETRYABLE',
        `${head} failed after ${ctx.attempts} attempt${ctx.attempts === 1 ? '' : 's'}: ${f.summary}. ` +
          (network
            ? 'The store did not answer (network or timeout): check that config.endpoint is reachable. '
            : 'The store is throttling or failing (5xx). ') +
          'The partition is retried on a later tick under the same key, which is created at most once.',
        { cause, retryable: true, unsent: ctx.unsent === true, ...(f.retryAfterMs === undefined ? {} : { retryAfterMs: f.retryAfterMs }) },
      );
    }
    case 'auth':
      return new HypsinkError(
        'HYPSINK_ERR_AUTH',
        `${head} was refused: ${f.summary}. Check the AWS credentials the default chain finds for this sink ` +
          `(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or the instance role) and that they allow ` +
          `s3:PutObject, s3:GetObject and s3:AbortMultipartUpload on bucket "${ctx.bucket}".`,
        { cause },
      );
    case 'noBucket':
      return new HypsinkError(
        'HYPSINK_ERR_DESTINATION',
        `${head}: bucket "${ctx.bucket}" does not exist (${f.summary}). ` +
          'Create the bucket, or fix config.bucket / config.endpoint / config.region of this sink.',
        { cause },
      );
    case 'destination': {
      let next = 'Check config.bucket, config.region and config.endpoint of this sink.';
      if (f.code === 'PermanentRedirect' || f.code === 'AuthorizationHeaderMalformed' || f.status === 301) {
        next = `The bucket "${ctx.bucket}" lives in another region: set config.region to it.`;
      } else if (f.code === 'NotImplemented' || f.status === 501) {
        next = 'The store does not support this request; if it rejects If-None-Match, set config.createIfAbsent to "head".';
      }
      return new HypsinkError('HYPSINK_ERR_DESTINATION', `${head} was refused: ${f.summary}. ${next}`, { cause });
    }
  }
}
