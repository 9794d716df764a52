/**
 * The worker protocol's version this SDK speaks (proto/composer/v1/worker.proto, "Versions";
 * composer_rpc.protocol on the Python side). The worker asks the coordinator at start
 * (GetCapabilities) and refuses one whose range leaves this version out.
 */

export const PROTOCOL_VERSION = 1;

/**
 * Why `sdk` (speaking `sdkVersion`) cannot work with the coordinator at `server` (speaking
 * `serverVersion`, serving SDKs from `serverMin`), or undefined when it can. Names both
 * versions and what to upgrade.
 */
export function incompatible(
  sdk: string,
  sdkVersion: number,
  server: string,
  serverVersion: number,
  serverMin: number,
): string | undefined {
  if (serverMin <= sdkVersion && sdkVersion <= serverVersion) {
    return undefined;
  }
  if (sdkVersion > serverVersion) {
    return (
      `the coordinator at ${server} speaks worker protocol version ${serverVersion}, ` +
      `older than this SDK's (${sdk}, protocol version ${sdkVersion}): upgrade the ` +
      `coordinator, or use an SDK of protocol version ${serverVersion}`
    );
  }
  return (
    `the coordinator at ${server} speaks worker protocol version ${serverVersion} and ` +
    `serves SDKs of protocol version ${serverMin} and newer; this SDK (${sdk}) speaks ` +
    `version ${sdkVersion}: upgrade the SDK`
  );
}
