"""Issue 25, item 7: the seed's Pattern 3 (examples/python/pattern3_ddp.py) from Python across two
"hosts": two network namespaces joined by a veth pair, one rank in each, started as torchrun
starts ranks (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; nothing else), gives the
losses of the same 2-rank job launched on one host, rank by rank. Across the hosts the gradients
go through Gloo's TCP transport, never shared memory.

The approach of tests/dist/test_multihost.cpp: needs root and iproute2's `ip` (skipped with the reason
otherwise, or where root may not create namespaces); the namespaces are named after this
process's pid and removed on every path, with those an earlier, killed run left behind; the
addresses (198.18.0.0/15, RFC 2544) exist only inside the namespaces.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
EXAMPLE = os.path.join(REPO, "examples", "python", "pattern3_ddp.py")
FMNIST = os.environ.get("FMNIST_DIR", "/usr/share/datasets/fashion-mnist")
STEPS = 5
ARGS = ["--model", "mlp", "--max-steps", str(STEPS), "--batch-size", "64", "--lr", "0.05", "--seed", "3",
        "--axle-order", "--log-every", "100"]
PREFIX = "axpy"  # namespaces axpy<pid>a and axpy<pid>b


def _ip():
    for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"):
        if os.access(p, os.X_OK):
            return p
    return shutil.which("ip")


def _remove_stale(ip):
    """Namespaces of earlier runs whose process is gone (killed before their cleanup ran)."""
    listing = subprocess.run([ip, "netns", "list"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        name = line.split(" ")[0]
        pid = name[len(PREFIX):-1]
        if not (name.startswith(PREFIX) and name[-1] in "ab" and pid.isdigit()):
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its process still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        subprocess.run([ip, "netns", "del", name], capture_output=True)


class TwoHosts:
    """Namespaces A (198.18.0.1) and B (198.18.0.2) joined by a veth pair; `why_not` says why they
    could not be made (then nothing is left)."""

    def __init__(self, ip):
        self.ip, self.why_not, self.made = ip, "", []
        _remove_stale(ip)
        base = f"{PREFIX}{os.getpid()}"
        self.a, self.b = base + "a", base + "b"
        va, vb = base + "x", base + "y"
        steps = [["netns", "add", self.a], ["netns", "add", self.b],
                 ["-n", self.a, "link", "add", va, "type", "veth", "peer", "name", vb, "netns", self.b],
                 ["-n", self.a, "addr", "add", "198.18.0.1/24", "dev", va],
                 ["-n", self.b, "addr", "add", "198.18.0.2/24", "dev", vb],
                 ["-n", self.a, "link", "set", va, "up"], ["-n", self.b, "link", "set", vb, "up"],
                 ["-n", self.a, "link", "set", "lo", "up"], ["-n", self.b, "link", "set", "lo", "up"]]
        for step in steps:
            r = subprocess.run([ip, *step], capture_output=True, text=True)
            if r.returncode != 0:
                self.why_not = f"'ip {' '.join(step)}' failed: {(r.stdout + r.stderr).strip()}"
                self.close()
                return
            if step[0] == "netns":
                self.made.append(step[2])

    def on(self, host):
        """The command prefix that runs a program on host 'a' or 'b'."""
        return [self.ip, "netns", "exec", self.a if host == "a" else self.b]

    def close(self):
        # Deleting a namespace deletes the veth end inside it, and with it the pair.
        for ns in self.made:
            subprocess.run([self.ip, "netns", "del", ns], capture_output=True)
        self.made = []


@pytest.fixture
def hosts():
    if os.geteuid() != 0:
        pytest.skip(f"needs root to create network namespaces (running as uid {os.geteuid()})")
    ip = _ip()
    if not ip:
        pytest.skip("needs iproute2's ip (apt-get install iproute2)")
    h = TwoHosts(ip)
    try:
        if h.why_not:  # root without the right to make namespaces (a container, a chroot)
            pytest.skip(f"cannot create two network namespaces: {h.why_not}")
        yield h
    finally:
        h.close()


def _env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AXLE_LAUNCH_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "AXLE_NUM_DEVICES", "CPU_NUM_DEVICES",
                                                              "GLOO_SOCKET_IFNAME", "AXLE_GLOO_HOST",
                                                              "AXLE_RENDEZVOUS_DIR")}
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _records(out):
    root, ext = os.path.splitext(str(out))
    with open(out) as f0, open(f"{root}.rank1{ext}") as f1:
        return [json.load(f0), json.load(f1)]


@pytest.mark.skipif(not os.path.exists(os.path.join(FMNIST, "train-images-idx3-ubyte.gz")),
                    reason=f"Fashion-MNIST not in {FMNIST} (Debian: dataset-fashion-mnist)")
def test_pattern3_on_two_namespace_hosts_gives_the_one_host_losses(hosts, tmp_path):
    out = tmp_path / "hosts.json"
    procs = []
    try:
        for r, host in ((0, "a"), (1, "b")):
            env = _env({"RANK": str(r), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "198.18.0.1",
                        "MASTER_PORT": "29500"})
            procs.append(subprocess.Popen([*hosts.on(host), sys.executable, EXAMPLE, *ARGS, "--json", str(out)],
                                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:  # a rank left waiting (the other failed) must not outlive its namespace
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r}:\n{outs[r][-4000:]}"
    across = _records(out)

    one_out = tmp_path / "one.json"
    p = subprocess.run([sys.executable, EXAMPLE, *ARGS, "--json", str(one_out)], env=_env({"AXLE_NUM_DEVICES": "2"}),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    one = _records(one_out)

    for r in (0, 1):
        assert across[r]["world_size"] == 2 and across[r]["rank"] == r
        assert len(across[r]["losses"]) == STEPS
        assert across[r]["losses"] == one[r]["losses"], (r, across[r]["losses"], one[r]["losses"])
        # Across hosts every all-reduce took Gloo's TCP path; on one host the shared-memory one.
        c, o = across[r]["counters"], one[r]["counters"]
        assert c.get("CollectiveAllReduce", 0) >= STEPS and c.get("CollectiveAllReduceShm", 0) == 0, c
        assert o.get("CollectiveAllReduceShm", 0) >= STEPS, o
    assert across[0]["losses"] != across[1]["losses"]  # each rank trained on its own share
