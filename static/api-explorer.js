// The REST API's explorer (/api/docs/): Swagger UI over the schema the page names. Programs'
// tokens go in "Authorize" (bearerToken); a signed-in member's requests carry the session, and
// a POST of theirs the CSRF token Django checks for sessions.
(function () {
  "use strict";
  const root = document.getElementById("swagger-ui");
  const csrfToken = root.dataset.csrfToken;
  window.ui = SwaggerUIBundle({
    url: root.dataset.schemaUrl,
    dom_id: "#swagger-ui",
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    deepLinking: true,
    requestInterceptor: function (request) {
      if (request.method && request.method !== "GET" && csrfToken) {
        request.headers["X-CSRFToken"] = csrfToken;
      }
      return request;
    },
  });
})();
