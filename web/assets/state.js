// The page's shared state: the session list, the session shown, recent activity, and the
// open session view (set by the router).

export const state = { sessions: [], current: null, lastActivity: new Map(), view: null };
