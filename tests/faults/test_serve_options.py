"""`devicefit serve`'s options refuse what uvicorn would silently misread, before binding: a port
past 65535 (uvicorn bound 99999 mod 65536 = 34463 and logged 99999), and a bad API_CACHE_SIZE in
the environment (once a traceback of every devicefit command at import)."""
import os
import subprocess
import sys


def devicefit(*args, env=None):
    return subprocess.run([sys.executable, "-m", "devicefit.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_a_port_outside_1_to_65535_is_a_usage_error_not_another_port():
    for port in ("99999", "0", "-1"):
        out = devicefit("serve", "--port", port, "--no-warm-up")
        assert out.returncode == 2 and "--port" in out.stderr, (port, out.stderr[-2000:])


def test_a_bad_api_cache_size_breaks_only_serve_and_says_which_option():
    out = devicefit("models", "--help", env={"API_CACHE_SIZE": "abc"})
    assert out.returncode == 0, out.stderr[-2000:]
    out = devicefit("serve", "--no-warm-up", env={"API_CACHE_SIZE": "abc"})
    assert out.returncode == 2 and "--cache-size" in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    out = devicefit("serve", "--cache-size", "-1")
    assert out.returncode == 2 and "--cache-size" in out.stderr


def test_the_asgi_module_names_a_bad_api_cache_size():
    """`uvicorn devicefit.api.main:app` reads API_CACHE_SIZE itself: a bad value is refused by
    name, not as int()'s 'invalid literal ... 'abc''."""
    for bad in ("abc", "-1"):
        out = subprocess.run([sys.executable, "-c", "import devicefit.api.main"], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "API_CACHE_SIZE": bad})
        assert out.returncode != 0 and "API_CACHE_SIZE must be a whole number >= 0" in out.stderr and repr(bad) in out.stderr, out.stderr[-2000:]
