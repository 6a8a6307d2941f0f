# Wraps a text file (PTX) as a C++ header holding one string constant.
#   cmake -DINPUT=<file> -DOUTPUT=<header> -DNAMESPACE=<ns> -DNAME=<identifier> -P EmbedText.cmake
file(READ "${INPUT}" text)
if(text MATCHES "\\)embedded\"")
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )embedded\"")
endif()
get_filename_component(source_name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
     "// Generated from ${source_name} at build time: do not edit.\n"
     "#pragma once\n\n"
     "namespace ${NAMESPACE} {\n\n"
     "inline constexpr char ${NAME}[] = R\"embedded(${text})embedded\";\n\n"
     "}  // namespace ${NAMESPACE}\n")
# Only touch the header when the text changed, so dependants are not rebuilt for nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
