"""``python -m gpumat``: one line saying what this build of gpumat contains and what it can use."""

import gpumat


def main() -> None:
    """Prints the build summary (CUDA or not, compute capabilities) and the usable GPUs."""
    info = gpumat.build_info()
    if info["cuda"]:
        built = f"built with CUDA for compute capabilities {' '.join(info['cuda_arch'])}"
    else:
        built = "built WITHOUT CUDA (host device and emulated CUDA device only)"
    print(
        f"gpumat {info['version']}: {built}; {info['cuda_device_count']} usable CUDA GPU(s), "
        f"{info['emu_device_count']} emulated; host BLAS {info['blas']}, "
        f"OpenMP {'on' if info['openmp'] else 'off'}"
    )


if __name__ == "__main__":
    main()
