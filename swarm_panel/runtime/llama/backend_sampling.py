"""Whether requests' sampler chains run inside the compute graph (llama.cpp's backend sampling), and why.

`auto` puts them there when layers are offloaded to a GPU, where the logits then stay on the card. On a CPU
it does not pay (docs/gpu.md, "Sampling in the graph"), and neither on a software device that runs on the
CPU, such as Mesa's lavapipe: there `auto` keeps it off. Mesa 22.3's lavapipe also corrupts its heap when a
sampler is attached to a context that has decoded (docs/gpu.md, "The crash at six chats"), which a server
does whenever a request starts; Mesa 25.0's does not.
"""

from __future__ import annotations

import logging

from swarm_panel.runtime.llama.devices import Device, offload_devices

log = logging.getLogger(__name__)

SOFTWARE_DEVICES = ("llvmpipe",)


def software(device: Device) -> bool:
    """A device that computes on the CPU (lavapipe reports itself as llvmpipe)."""
    return any(name in device.description.lower() for name in SOFTWARE_DEVICES)


def choose_backend_sampling(setting: str, offloads: bool) -> tuple[bool, str]:
    """(on, why) for the `backend_sampling` setting ('auto', 'on', 'off'), where layers are offloaded or not."""
    if setting == "off":
        return False, "off: as asked"
    devices = offload_devices() if offloads else []
    on_software = [device for device in devices if software(device)]
    if setting == "on":
        if on_software:
            log.warning("sampling in the graph is on as asked, on %s: Mesa 22.3's lavapipe crashes with it "
                        "(docs/gpu.md)", on_software[0].description)
        return True, "on: as asked"
    if not offloads:
        return False, "off: on a CPU the graph's samplers cost more than the logits' copy"
    if on_software:
        return False, (f"off on {on_software[0].description}, a device that runs on the CPU, where the graph's "
                       "samplers cost more than the logits' copy (and Mesa 22.3's crashes with them)")
    return True, f"on: layers offloaded to {', '.join(sorted({d.backend for d in devices})) or 'the GPU'}"
