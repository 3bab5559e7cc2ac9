// src/io.cpp — part of the fusor_runtime library (FUSOR_SEPARATE_COMPILATION,
// see fusor/config.hpp): the definitions of fusor/io/'s non-template functions,
// compiled once here instead of in every program that includes the headers.
#if !defined(FUSOR_SEPARATE_COMPILATION)
#error "fusor_runtime is compiled with FUSOR_SEPARATE_COMPILATION (CMake's fusor::runtime defines it)"
#endif

#include "fusor/io/impl/text_number.ipp"
#include "fusor/io/impl/json.ipp"
#include "fusor/io/impl/safetensors.ipp"
#include "fusor/io/impl/file.ipp"
#include "fusor/io/impl/checkpoint.ipp"
#include "fusor/io/impl/sharded_checkpoint.ipp"

namespace fusor::io {
template std::string number_fault_text<int>(std::string_view, number_fault);
template std::string number_fault_text<long>(std::string_view, number_fault);
template std::string number_fault_text<unsigned long>(std::string_view, number_fault);
template std::string number_fault_text<float>(std::string_view, number_fault);
template std::string number_fault_text<double>(std::string_view, number_fault);
template int metadata_number<int>(const std::map<std::string, std::string>&, const std::string&,
                                  const std::filesystem::path&);
template long metadata_number<long>(const std::map<std::string, std::string>&, const std::string&,
                                    const std::filesystem::path&);
template unsigned long metadata_number<unsigned long>(const std::map<std::string, std::string>&, const std::string&,
                                                      const std::filesystem::path&);
template double metadata_number<double>(const std::map<std::string, std::string>&, const std::string&,
                                        const std::filesystem::path&);
}  // namespace fusor::io
