// Package web is the dashboard: server-rendered HTML pages under /ui/ that
// show a server's replicated state and act on it.
//
// The dashboard holds no business rules and reads no state directly: every
// page and every action is a request to the v1 API made in-process with the
// logged-in user's token (Backend.Do). Reads therefore see exactly what the
// API would show that token (lists filtered, the deployment spec never
// included, diffs redacted), and writes go through the same handlers, the
// same ACL check on the leader and the same forwarding from a follower as a
// CLI request, with the token's name recorded as the actor.
//
// Guarantees:
//   - The session is the token secret in an HttpOnly, SameSite=Strict
//     cookie (Secure when the server speaks TLS); it never appears in a page.
//   - Every form carries a per-session CSRF token (a random value kept in
//     its own SameSite=Strict cookie), compared in constant time; a POST
//     whose Origin or Sec-Fetch-Site names another site is refused.
//   - Every answer carries a strict Content-Security-Policy (no inline
//     script or style), X-Frame-Options DENY and nosniff.
//   - Live updates come from one server-sent-event stream per tab that
//     blocks on the state index (Backend.WaitChange) and watches the
//     cluster's membership; the number of open streams is bounded, and a
//     stream ends when its server shuts down. The page's script swaps the
//     regions that changed, adds and removes whole regions, and leaves a
//     form being typed in as it is; when the server stops answering it
//     says so, disables the actions and links the other servers'
//     dashboards.
//   - An action the API refuses sends the browser back to the page it
//     came from, which shows why (carried once in a cookie of its own).
//   - Assets are embedded and linked by the hash of their content, so an
//     upgrade never serves an old script from a cache; pages work without
//     JavaScript for reading and acting.
package web
