// The page's shared state: the session list (and the ACP connections shown in it), the session shown, recent activity, and the
// open session view (set by the router).

export const state = { sessions: [], acp: [], current: null, lastActivity: new Map(), view: null };
