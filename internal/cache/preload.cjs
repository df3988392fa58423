// runnerpool cache preload. The agent puts `NODE_OPTIONS=--require <this file>` in the runner's .env,
// so node loads it inside every node action before the action's own code (a workflow cannot change
// NODE_OPTIONS through GITHUB_ENV: the runner blocks it, actions/runner FileCommandManager.cs). The
// runner sets ACTIONS_RESULTS_URL from the job message after the job's env (NodeScriptActionHandler.cs),
// so this is the first place it can be pointed elsewhere. It points the cache client at the agent's
// loopback server only while that server says it is ready; otherwise it changes nothing, and the job
// uses GitHub's cache as if the agent had none. It never throws: a broken preload must not fail a step.
'use strict';
try {
  const ready = process.env.RUNNERPOOL_CACHE_READY || '/run/runnerpool/cache.json';
  if (process.env.ACTIONS_CACHE_SERVICE_V2 && process.env.ACTIONS_RESULTS_URL) {
    const state = JSON.parse(require('fs').readFileSync(ready, 'utf8'));
    if (typeof state.url === 'string' && /^http:\/\/127\.0\.0\.1:[0-9]+\/$/.test(state.url)) {
      process.env.RUNNERPOOL_UPSTREAM_RESULTS_URL = process.env.ACTIONS_RESULTS_URL;
      process.env.ACTIONS_RESULTS_URL = state.url;
    }
  }
} catch (e) {
  // No ready file, or not ours: leave GitHub's URL.
}
