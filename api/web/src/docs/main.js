// The API documentation: Swagger UI (swagger-ui-dist, loaded by docs.html) on our OpenAPI
// document. "Try it out" sends the viewer's credentials, when the viewer has some.
import { authorization } from "../viewer/auth.js";

const SwaggerUIBundle = globalThis.SwaggerUIBundle;

SwaggerUIBundle({
  url: new URL("api-user/openapi.json", document.baseURI).href,
  dom_id: "#swagger-ui",
  deepLinking: true,
  docExpansion: "list",
  defaultModelsExpandDepth: 0,
  presets: [SwaggerUIBundle.presets.apis],
  layout: "BaseLayout",
  validatorUrl: null, // no badge from validator.swagger.io: nothing is fetched from elsewhere
  requestInterceptor(request) {
    const header = authorization();
    if (header && !request.headers.Authorization) request.headers.Authorization = header;
    return request;
  },
});
