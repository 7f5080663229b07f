"use strict";
// Headers for the dashboard's writes: the bearer token a user entered (when the server needs
// one) and the page's CSRF token, which tells the server the write comes from its own pages.
const PolyAuth = {
  headers() {
    const token = localStorage.getItem("polytrace-token");
    const csrf = document.querySelector('meta[name="polytrace-csrf"]').content;
    return {"X-PolyTrace-CSRF": csrf, ...(token ? {Authorization: `Bearer ${token}`} : {})};
  },
};
