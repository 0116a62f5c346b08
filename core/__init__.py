"""The ground floor: plumbing every app uses and that imports no app.

- ``errors``: domain errors (``ApplicationError`` and its 400 / 403 / 404 / 409 kinds);
- ``env``: typed settings readers that fail loudly, ``NAME_FILE`` secrets;
- ``api``: the REST API's base (strict input serializers, pagination, parsers, renderers,
  throttling, the one exception handler, schema helpers);
- ``pages``: the one mapping from a domain error to the page a person sees.
"""
