# Thread-level emulation of cuda/attention.cu body_sgemm (tile loads into the
# shared-memory layout, ldmatrix fragments with and without .trans, mma.sync
# m16n8k16 fragment semantics, the epilogue) in exact integer arithmetic,
# checked against direct multi-head attention over packed and padded QKV
# layouts with ragged tiles and both load paths. A transcription: keep it in
# step with the CUDA. Runs without a GPU: python3 kernels/testdata/sgemm_emulate.py
import random
BM=BN=64; BK=32; NT=128
A_LD=BK+8; B_LD=BN+8; BT_LD=BK+8
A_EL=BM*A_LD; B_EL=BN*BT_LD; STAGE=A_EL+B_EL

def run(p, A, B, transB):
    C = {}
    tilesN=(p['N']+BN-1)//BN; tilesM=(p['M']+BM-1)//BM
    for lb in range(tilesN*tilesM*p['batch']):
        smem=[None]*(2*STAGE)
        tn=lb%tilesN; tm=(lb//tilesN)%tilesM; b=lb//(tilesN*tilesM)
        m0=tm*BM; n0=tn*BN; o=b//p['inner']; hi=b%p['inner']
        a_b=p['offA']+o*p['oA']+hi*p['iA']; b_b=p['offB']+o*p['oB']+hi*p['iB']
        def load(st,k0):
            sa=st*STAGE; sb=sa+A_EL
            for tid in range(NT):
                if p['vecA']:
                    for c in range(BM*BK//8//NT):
                        q=tid+c*NT; row=q//(BK//8); kc=(q%(BK//8))*8
                        ok=m0+row<p['M'] and k0+kc<p['K']
                        for e in range(8):
                            smem[sa+row*A_LD+kc+e]= A[a_b+(m0+row)*p['ldA']+k0+kc+e] if ok else 0
                else:
                    for q in range(tid,BM*BK,NT):
                        row=q//BK; kk=q%BK; m=m0+row; k=k0+kk
                        smem[sa+row*A_LD+kk]= A[a_b+m*p['ldA']+k] if (m<p['M'] and k<p['K']) else 0
                if transB:
                    if p['vecB']:
                        for c in range(BN*BK//8//NT):
                            q=tid+c*NT; row=q//(BK//8); kc=(q%(BK//8))*8
                            ok=n0+row<p['N'] and k0+kc<p['K']
                            for e in range(8):
                                smem[sb+row*BT_LD+kc+e]= B[b_b+(n0+row)*p['ldB']+k0+kc+e] if ok else 0
                    else:
                        for q in range(tid,BN*BK,NT):
                            row=q//BK; kk=q%BK; n=n0+row; k=k0+kk
                            smem[sb+row*BT_LD+kk]= B[b_b+n*p['ldB']+k] if (n<p['N'] and k<p['K']) else 0
                else:
                    if p['vecB']:
                        for c in range(BK*BN//8//NT):
                            q=tid+c*NT; row=q//(BN//8); nc=(q%(BN//8))*8
                            ok=k0+row<p['K'] and n0+nc<p['N']
                            for e in range(8):
                                smem[sb+row*B_LD+nc+e]= B[b_b+(k0+row)*p['ldB']+n0+nc+e] if ok else 0
                    else:
                        for q in range(tid,BK*BN,NT):
                            row=q//BN; nn=q%BN; k=k0+row; n=n0+nn
                            smem[sb+row*B_LD+nn]= B[b_b+k*p['ldB']+n] if (k<p['K'] and n<p['N']) else 0
        acc={}  # (warp,lane,i,j,q)
        for w in range(4):
            for l in range(32):
                for i in range(2):
                    for j in range(4):
                        for q in range(4): acc[(w,l,i,j,q)]=0
        KT=(p['K']+BK-1)//BK
        def ldm(addrs, trans):
            # addrs: lane -> element index of row start (8 elems). returns per lane 4 regs of 2 elems
            out=[[None]*4 for _ in range(32)]
            for qm in range(4):
                mat=[[smem[addrs[8*qm+r]+c] for c in range(8)] for r in range(8)]
                if trans: mat=[[mat[r][c] for r in range(8)] for c in range(8)]
                for T in range(32):
                    out[T][qm]=mat[T//4][2*(T%4):2*(T%4)+2]
            return out
        for kt in range(KT):
            load(kt&1, kt*BK)
            st=(kt&1)*STAGE
            for w in range(4):
                wm=(w>>1)*32; wn=(w&1)*32
                for kk in (0,16):
                    af=[None]*2; bf=[[None,None] for _ in range(4)]
                    for i in range(2):
                        addrs=[st+(wm+(l&15))*A_LD+(l>>4)*8 + i*16*A_LD+kk for l in range(32)]
                        af[i]=ldm(addrs, False)
                    for j in (0,2):
                        if transB:
                            addrs=[st+A_EL+(wn+(l>>4)*8+(l&7))*BT_LD+((l>>3)&1)*8 + j*8*BT_LD+kk for l in range(32)]
                            t=ldm(addrs, False)
                        else:
                            addrs=[st+A_EL+(l&15)*B_LD+wn+(l>>4)*8 + kk*B_LD+j*8 for l in range(32)]
                            t=ldm(addrs, True)
                        bf[j]=[[t[l][0],t[l][1]] for l in range(32)]
                        bf[j+1]=[[t[l][2],t[l][3]] for l in range(32)]
                    # mma m16n8k16 semantics
                    for i in range(2):
                        # reconstruct A 16x16 from fragments
                        Am=[[None]*16 for _ in range(16)]
                        for l in range(32):
                            g=l//4; t4=l%4; a=af[i][l]
                            Am[g][2*t4:2*t4+2]=a[0]; Am[g+8][2*t4:2*t4+2]=a[1]
                            Am[g][8+2*t4:8+2*t4+2]=a[2]; Am[g+8][8+2*t4:8+2*t4+2]=a[3]
                        for j in range(4):
                            Bm=[[None]*8 for _ in range(16)]
                            for l in range(32):
                                g=l//4; t4=l%4; b0,b1=bf[j][l]
                                Bm[2*t4][g],Bm[2*t4+1][g]=b0
                                Bm[8+2*t4][g],Bm[8+2*t4+1][g]=b1
                            for l in range(32):
                                g=l//4; t4=l%4
                                for h in range(2):
                                    for e in range(2):
                                        r=g+8*h; c=2*t4+e
                                        acc[(w,l,i,j,2*h+e)]+=sum(Am[r][k]*Bm[k][c] for k in range(16))
        cbase=o*p['oC']+hi*p['iC']
        for w in range(4):
            wm=(w>>1)*32; wn=(w&1)*32
            for l in range(32):
                g=l>>2; t4=l&3
                for i in range(2):
                    for j in range(4):
                        for h in range(2):
                            m=m0+wm+i*16+g+h*8; n=n0+wn+j*8+t4*2
                            if m>=p['M'] or n>=p['N']: continue
                            idx=cbase+m*p['ldC']+n
                            assert idx not in C
                            C[idx]=acc[(w,l,i,j,2*h)]*p['scale']
                            if n+1<p['N']:
                                assert idx+1 not in C
                                C[idx+1]=acc[(w,l,i,j,2*h+1)]*p['scale']
    return C

def attn(seqs, seq, heads, d, ld=None, part='scores'):
    h=heads*d; ld=ld or 3*h
    qkv=[random.randint(-3,3) for _ in range(seqs*seq*ld)]
    P=[random.randint(-3,3) for _ in range(seqs*heads*seq*seq)]
    m8=lambda *v: all(x%8==0 for x in v)
    if part=='scores':
        p=dict(M=seq,N=seq,K=d,inner=heads,batch=seqs*heads,offA=0,oA=seq*ld,iA=d,ldA=ld,offB=h,oB=seq*ld,iB=d,ldB=ld,
               oC=heads*seq*seq,iC=seq*seq,ldC=seq,scale=1)
        p['vecA']=m8(0,ld,seq*ld,d,d); p['vecB']=m8(h,ld,seq*ld,d,d)
        C=run(p,qkv,qkv,True)
        for s in range(seqs):
            for hd in range(heads):
                for i in range(seq):
                    for j in range(seq):
                        want=sum(qkv[(s*seq+i)*ld+hd*d+k]*qkv[(s*seq+j)*ld+h+hd*d+k] for k in range(d))
                        assert C[((s*heads+hd)*seq+i)*seq+j]==want, (s,hd,i,j)
        assert len(C)==seqs*heads*seq*seq
    else:
        p=dict(M=seq,N=d,K=seq,inner=heads,batch=seqs*heads,offA=0,oA=heads*seq*seq,iA=seq*seq,ldA=seq,offB=2*h,oB=seq*ld,iB=d,ldB=ld,
               oC=seq*h,iC=d,ldC=h,scale=1)
        p['vecA']=m8(0,seq,heads*seq*seq,seq*seq,seq); p['vecB']=m8(2*h,ld,seq*ld,d,d)
        C=run(p,P,qkv,False)
        for s in range(seqs):
            for hd in range(heads):
                for i in range(seq):
                    for k in range(d):
                        want=sum(P[((s*heads+hd)*seq+i)*seq+j]*qkv[(s*seq+j)*ld+2*h+hd*d+k] for j in range(seq))
                        assert C[(s*seq+i)*h+hd*d+k]==want
        assert len(C)==seqs*seq*h
    print(part, seqs, seq, heads, d, ld, 'vec', p['vecA'], p['vecB'], 'OK')

random.seed(1)
attn(1, 16, 2, 8, part='scores'); attn(1, 16, 2, 8, part='context')
attn(2, 70, 1, 16, part='scores'); attn(2, 70, 1, 16, part='context')
attn(1, 9, 2, 6, ld=41, part='scores'); attn(1, 9, 2, 6, ld=41, part='context')
attn(1, 40, 1, 40, part='scores'); attn(1, 40, 1, 40, part='context')
