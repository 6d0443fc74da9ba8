package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"atoll/gpu"
)

// module is a loaded module.
type module struct {
	d   *Device
	idx int
}

// LoadModule loads a cubin, PTX or CUDA C source (compiled with NVRTC for this
// device's architecture, cached on disk) into the primary context. Further
// contexts load it when a launch first needs it there.
func (d *Device) LoadModule(src gpu.ModuleSource) (gpu.Module, error) {
	if err := d.live(); err != nil {
		return nil, err
	}
	var image []byte
	switch {
	case len(src.Cubin) > 0:
		image = append([]byte(nil), src.Cubin...)
	case len(src.PTX) > 0:
		image = append(append([]byte(nil), src.PTX...), 0)
	case src.CUDA != "":
		img, err := d.compileCached(src.CUDA, src.Name)
		if err != nil {
			return nil, err
		}
		image = img
	default:
		return nil, fmt.Errorf("cuda: module %q has no code (set CUDA, PTX or Cubin)", src.Name)
	}
	m := &moduleRec{name: src.Name, image: image}
	d.modules = append(d.modules, m)
	if _, err := d.moduleIn(len(d.modules)-1, 0); err != nil {
		d.modules = d.modules[:len(d.modules)-1]
		return nil, err
	}
	return &module{d: d, idx: len(d.modules) - 1}, nil
}

// moduleIn returns module i loaded in context c, loading it if needed.
func (d *Device) moduleIn(i int, c int32) (uintptr, error) {
	m := d.modules[i]
	if m.native[c] != 0 {
		return m.native[c], nil
	}
	if err := d.use(c); err != nil {
		return 0, err
	}
	var h uintptr
	r := d.drv.call(d.drv.cuModuleLoadData, uintptr(unsafe.Pointer(&h)), uintptr(unsafe.Pointer(&m.image[0])))
	runtime.KeepAlive(m.image)
	if err := check("cuModuleLoadData", r); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Hint = fmt.Sprintf("module %q", m.name)
		}
		return 0, err
	}
	m.native[c] = h
	return h, nil
}

// Function resolves a kernel of the module by its (extern "C") name.
func (m *module) Function(name string) (gpu.Func, error) {
	d := m.d
	if err := d.live(); err != nil {
		return 0, err
	}
	f := funcRec{name: name, mod: m.idx}
	h, err := d.funcIn(&f, 0)
	if err != nil {
		return 0, err
	}
	fattr := func(a int) (int, error) {
		var v int32
		err := check("cuFuncGetAttribute", d.drv.call(d.drv.cuFuncGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(a), h))
		return int(v), err
	}
	if f.maxThreads, err = fattr(funcAttrMaxThreadsPerBlock); err != nil {
		return 0, err
	}
	if f.staticSmem, err = fattr(funcAttrSharedSizeBytes); err != nil {
		return 0, err
	}
	if f.regs, err = fattr(funcAttrNumRegs); err != nil {
		return 0, err
	}
	if d.drv.cuFuncGetParamInfo != 0 {
		// Sum the parameter list: the last parameter's offset + size.
		for i := 0; ; i++ {
			var off, size uint64
			if d.drv.call(d.drv.cuFuncGetParamInfo, h, uintptr(i), uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size))) != resultSuccess {
				break
			}
			f.paramBytes = int(off + size)
		}
	}
	d.funcs = append(d.funcs, f)
	return gpu.Func(len(d.funcs) - 1), nil
}

// funcIn returns f's handle in context c, loading its module there if needed.
func (d *Device) funcIn(f *funcRec, c int32) (uintptr, error) {
	if f.native[c] != 0 {
		return f.native[c], nil
	}
	mh, err := d.moduleIn(f.mod, c)
	if err != nil {
		return 0, err
	}
	cname := append([]byte(f.name), 0)
	var h uintptr
	if err := check("cuModuleGetFunction", d.drv.call(d.drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&h)), mh, uintptr(unsafe.Pointer(&cname[0])))); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Hint = fmt.Sprintf("no kernel %q in module %q (declare it extern \"C\")", f.name, d.modules[f.mod].name)
		}
		return 0, err
	}
	f.native[c] = h
	f.dynSmem[c] = defaultDynSharedLimit
	return h, nil
}

// FuncAttributes reports what the driver says about a loaded kernel:
// registers per thread, static shared memory and the largest block.
func (d *Device) FuncAttributes(fn gpu.Func) (registers, staticSharedMem, maxThreadsPerBlock int, err error) {
	if fn <= 0 || int(fn) >= len(d.funcs) {
		return 0, 0, 0, fmt.Errorf("%w: cuda: function %d", gpu.ErrInvalidHandle, fn)
	}
	f := &d.funcs[fn]
	return f.regs, f.staticSmem, f.maxThreads, nil
}
