"use strict";
// The run page's Simulate button: POST /api/runs/{id}/whatif, then reload
// the page so the What if section draws from the stored results like any other section.
const PolyWhatIf = {
  bind(button, status) {
    if (!button) return;
    button.addEventListener("click", async () => {
      button.disabled = true;
      status.className = "status";
      status.textContent = "Simulating every dispatch policy over the run's steps…";
      let res, body;
      try {
        res = await fetch(button.dataset.url, {method: "POST", headers: PolyAuth.headers()});
        body = await res.json().catch(() => ({error: `${res.status} ${res.statusText}`}));
      } catch (e) {
        res = {ok: false}; body = {error: `request failed: ${e.message}`};
      }
      if (!res.ok) {
        status.className = "status error-line";
        status.textContent = res.status === 401
          ? `${body.error} (enter the token on the runs page)` : body.error;
        button.disabled = false;
        return;
      }
      status.textContent = `Simulated ${body.policies.length} policies; drawing…`;
      location.hash = "what-if";
      location.reload();
    });
  },
};
