// The interactive docs' only script of our own: Swagger UI (served by this server from the
// pinned swagger-ui-bundle-v2 package, never from a CDN) over this server's /openapi.json.
// It is a file, not an inline script, so the page's policy admits this server's scripts only.
window.addEventListener("DOMContentLoaded", function () {
  "use strict";
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
    validatorUrl: null, // no badge fetched from a validator on another site
    queryConfigEnabled: false, // a ?url=… in the address never loads another document
  });
});
