/*
 * tests/cuda_emu/emu_magic.h: the first line of an emulated "cubin" (emu_nvrtc.c writes it,
 * emu_cuda.c reads it); the CUDA C++ source follows.
 */
#ifndef TESSERA_TESTS_CUDA_EMU_MAGIC_H
#define TESSERA_TESTS_CUDA_EMU_MAGIC_H
#define EMU_MAGIC "// tessera-emulated-cubin\n"
#endif
