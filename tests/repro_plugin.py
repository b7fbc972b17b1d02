import os, json
def pytest_collection_modifyitems(items):
    from tests.e2e import test_rest_model as m
    m.RestModel._hypothesis_internal_use_reproduce_failure = ('6.170.17', os.environ["BLOB"])
    orig = m.Api.call
    log = open("/tmp/calls.log", "w")
    def call(self, url, method, path, token, **kw):
        r = orig(self, url, method, path, token, **kw)
        log.write(f"{method} {path} {json.dumps(kw.get('json') or kw.get('params'))} -> {r.status_code} {r.text[:400]}\n"); log.flush()
        return r
    m.Api.call = call
