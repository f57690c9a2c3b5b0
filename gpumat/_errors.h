// Translates the C++ exception being handled into a Python exception (Cython calls this from its
// `except +gpumat_raise_py_error` handlers, inside a catch block and holding the GIL).
#pragma once

#include <Python.h>

#include <new>
#include <stdexcept>

#include "gpumat/error.h"

static PyObject* gpumat_cuda_error_type = nullptr;  // gpumat.CudaError, set when _core is imported

static inline void gpumat_set_cuda_error_type(PyObject* type) {
  Py_XINCREF(type);
  gpumat_cuda_error_type = type;
}

static inline void gpumat_raise_py_error() {
  try {
    throw;
  } catch (const gpumat::ShapeError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const gpumat::DTypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const std::invalid_argument& e) {  // after its subclasses ShapeError and DTypeError
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const gpumat::OutOfMemory& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
  } catch (const gpumat::CudaError& e) {
    PyErr_SetString(gpumat_cuda_error_type ? gpumat_cuda_error_type : PyExc_RuntimeError, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_SetString(PyExc_MemoryError, "gpumat: host memory allocation failed");
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "gpumat: unknown C++ exception");
  }
}
