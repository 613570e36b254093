"""mitmproxy addon of the comparison benchmark (bench/run.sh): what a user would write instead of
Mint, replacing the placeholder `{{mint:bench}}` in the Authorization header with the secret from
the BENCH_SECRET environment variable. It checks nothing else and scrubs nothing."""

import os

PLACEHOLDER = "{{mint:bench}}"
SECRET = os.environ["BENCH_SECRET"]


class InjectSecret:
    def request(self, flow):
        value = flow.request.headers.get("authorization")
        if value is not None and PLACEHOLDER in value:
            flow.request.headers["authorization"] = value.replace(PLACEHOLDER, SECRET)


addons = [InjectSecret()]
