// Uses the installed tilefeed::cuda and the CUDA runtime (CUDA::cudart from the package) on
// a machine that may have no GPU: it asks whether a device is usable and says why not.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "tilefeed/cuda/device.h"

int main() {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  std::string why;
  const bool usable = tilefeed::cuda::DeviceAvailable(&why);
  std::printf("cuda_consumer: CUDA runtime %d; device usable: %s%s%s\n", runtime,
              usable ? "yes" : "no", usable ? "" : ": ", why.c_str());
  return 0;
}
