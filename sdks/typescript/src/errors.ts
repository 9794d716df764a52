/**
 * What a handler throws to say how its attempt failed, and what the worker itself throws
 * (as composer_sdk.errors in the Python SDK):
 *
 *     TaskFailed            the attempt failed; the node's retry policy decides (`code` tags it)
 *     └── PermanentError    retrying cannot help: the node fails now, whatever attempts are left
 *
 *     SdkError              misconfigured, or the coordinator answered with an error
 *     └── CoordinatorUnavailable  the coordinator could not be reached after the configured tries
 *
 * Any other thrown value fails the attempt as a retryable error carrying its name and
 * message. A lost lease or a drain past its grace is no failure: nothing is reported.
 */

/** The attempt failed; it is retried while the node's policy allows. */
export class TaskFailed extends Error {
  readonly permanent: boolean = false;
  readonly code: string | undefined;

  constructor(message: string, options: { code?: string } = {}) {
    super(message);
    this.name = "TaskFailed";
    this.code = options.code;
  }
}

/** The attempt failed and no retry can succeed (bad input, a refused card, ...). */
export class PermanentError extends TaskFailed {
  override readonly permanent: boolean = true;

  constructor(message: string, options: { code?: string } = {}) {
    super(message, options);
    this.name = "PermanentError";
  }
}

/**
 * The worker is misconfigured (bad token, an engine of another protocol version), or the
 * coordinator refused a call (`code` names the gRPC status, e.g. "INTERNAL").
 */
export class SdkError extends Error {
  readonly code: string | undefined;

  constructor(message: string, options: { code?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SdkError";
    this.code = options.code;
  }
}

/** Every try of a call failed with a transient status (UNAVAILABLE, ...). */
export class CoordinatorUnavailable extends SdkError {
  constructor(message: string, options: { code?: string; cause?: unknown } = {}) {
    super(message, options);
    this.name = "CoordinatorUnavailable";
  }
}
