/*
 * Big-endian fields of PDUs and CDBs, read and written byte by byte.
 *
 * Not tgt's get_unaligned_be32 (be_byteshift.h): it shifts a byte promoted
 * to int left by 24, undefined for a top byte of 0x80 or more, and these
 * fields come from hosts (UBSan stopped tgtd on an Expected Data Transfer
 * Length of 0xffffffff).
 */
#ifndef RBIO_GLUE_WIRE_BYTES_H
#define RBIO_GLUE_WIRE_BYTES_H

#include <stdint.h>

static inline uint32_t rbio_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint32_t rbio_get_be24(const uint8_t *p)
{
	return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static inline void rbio_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

#endif
