// The live server the tests use; sdk/test.sh starts one and sets these.
export const socketPath = process.env.AIRLOCK_SOCKET;
export const url = process.env.AIRLOCK_URL;
export const token = process.env.AIRLOCK_TOKEN;
if (!socketPath) {
  throw new Error("these tests need a live server: set AIRLOCK_SOCKET (and AIRLOCK_URL, AIRLOCK_TOKEN), or run sdk/test.sh");
}
