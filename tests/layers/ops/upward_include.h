// upward_include.h — a file of a stand-in ops layer that includes a header of the model layer above it;
// the layer include check must refuse it (tests/CMakeLists.txt, Note [Layer include checks] in
// src/CMakeLists.txt).
#pragma once

#include "core/error.h"
#include "model/config.h"
