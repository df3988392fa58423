// toolkit.mjs: runs the published @actions/cache (installed in test/stack/node) the way an action
// does: `node toolkit.mjs save KEY PATH` or `node toolkit.mjs restore PATH KEY [RESTORE_KEY...]`.
// The toolkit is found at $TOOLKIT (a file URL of its lib/cache.js). Its own ::warning:: lines go to
// stdout as an action's do; the last line is this script's JSON result.
const cache = await import(process.env.TOOLKIT);
const [op, ...args] = process.argv.slice(2);
let result;
if (op === 'save') {
  const [key, path] = args;
  result = await cache.saveCache([path], key);
} else if (op === 'restore') {
  const [path, key, ...restoreKeys] = args;
  result = await cache.restoreCache([path], key, restoreKeys);
} else {
  throw new Error(`unknown op ${op}`);
}
console.log(JSON.stringify({result: result ?? null}));
