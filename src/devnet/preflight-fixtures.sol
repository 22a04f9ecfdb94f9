// SPDX-License-Identifier: MIT
// Test contracts for the transaction preflight: each one produces one finding for real.
pragma solidity ^0.8.24;

interface IERC20Like {
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
}

/// A plain ERC-20 (18 decimals): the other side of the Uniswap pools, and a token that accepts
/// transfers to its own address (USDC refuses them), so such a transfer really succeeds.
contract PreflightToken {
    string public name;
    string public symbol;
    uint8 public constant decimals = 18;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor(string memory name_, string memory symbol_, uint256 supply) {
        name = name_;
        symbol = symbol_;
        totalSupply = supply;
        balanceOf[msg.sender] = supply;
        emit Transfer(address(0), msg.sender, supply);
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 a = allowance[from][msg.sender];
        if (a != type(uint256).max) {
            require(a >= value, "PreflightToken: allowance");
            allowance[from][msg.sender] = a - value;
        }
        _move(from, to, value);
        return true;
    }

    function _move(address from, address to, uint256 value) internal {
        require(balanceOf[from] >= value, "PreflightToken: balance");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}

/// No receive(), no fallback, no payable function: any ETH sent to it reverts.
contract RejectsEth {
    uint256 public pings;

    function ping() external {
        pings += 1;
    }
}

/// Reverts in each way revert data can be encoded.
contract Reverter {
    error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed);
    error VaultLocked(uint256 until);

    function failWithReason() external pure {
        revert("vault is closed");
    }

    function failWithKnownError() external view {
        revert ERC20InsufficientBalance(msg.sender, 0, 1);
    }

    function failWithCustomError() external view {
        revert VaultLocked(block.timestamp + 1 days);
    }

    function failWithPanic(uint256 i) external pure returns (uint256) {
        uint256[] memory a = new uint256[](1);
        return a[i];
    }
}

/// Runs arbitrary library code in its own context: the pattern behind wallet modules and many exploits.
contract Delegator {
    function run(address lib, bytes calldata data) external payable returns (bytes memory) {
        (bool ok, bytes memory out) = lib.delegatecall(data);
        if (!ok) {
            assembly {
                revert(add(out, 32), mload(out))
            }
        }
        return out;
    }

    /// A smart account's own call (an EIP-7702 account calling itself): what it calls is opaque to a calldata decoder.
    function execute(address target, uint256 value, bytes calldata data) external payable returns (bytes memory) {
        require(msg.sender == address(this), "only the account itself");
        (bool ok, bytes memory out) = target.call{value: value}(data);
        require(ok, "call failed");
        return out;
    }

    receive() external payable {}
}

/// Library code for the Delegator: sends the whole ETH balance of whichever account runs it.
contract SweepLib {
    function sweep(address payable to) external {
        to.transfer(address(this).balance);
    }
}

/// A proxy that forwards its calldata unchanged to an implementation (EIP-1967 style).
contract ForwardingProxy {
    address private immutable implementation;

    constructor(address impl) {
        implementation = impl;
    }

    fallback() external payable {
        address impl = implementation;
        assembly {
            calldatacopy(0, 0, calldatasize())
            let ok := delegatecall(gas(), impl, 0, calldatasize(), 0, 0)
            returndatacopy(0, 0, returndatasize())
            switch ok
            case 0 { revert(0, returndatasize()) }
            default { return(0, returndatasize()) }
        }
    }
}

/// "Claim your airdrop": pulls the caller's approved tokens to a collector, gives nothing back.
contract Drainer {
    address private immutable collector;

    constructor(address collector_) {
        collector = collector_;
    }

    function claimAirdrop(address token, uint256 amount) external {
        require(IERC20Like(token).transferFrom(msg.sender, collector, amount), "Drainer: pull failed");
    }
}

/// The ERC-721 surface a setApprovalForAll preflight touches.
contract PreflightNft {
    string public constant name = "Preflight NFT";
    string public constant symbol = "PFN";
    mapping(address => mapping(address => bool)) public isApprovedForAll;

    event ApprovalForAll(address indexed owner, address indexed operator, bool approved);

    function setApprovalForAll(address operator, bool approved) external {
        isApprovedForAll[msg.sender][operator] = approved;
        emit ApprovalForAll(msg.sender, operator, approved);
    }

    function supportsInterface(bytes4 id) external pure returns (bool) {
        return id == 0x80ac58cd || id == 0x01ffc9a7;
    }
}

/// Stands in for Permit2 at its canonical address (Permit2's bytecode is not on npm): the
/// allowance-transfer approve(), with Permit2's signature and event.
contract Permit2Stub {
    event Approval(address indexed owner, address indexed token, address indexed spender, uint160 amount, uint48 expiration);

    mapping(address => mapping(address => mapping(address => uint160))) public allowed;

    function approve(address token, address spender, uint160 amount, uint48 expiration) external {
        allowed[msg.sender][token][spender] = amount;
        emit Approval(msg.sender, token, spender, amount, expiration);
    }
}
